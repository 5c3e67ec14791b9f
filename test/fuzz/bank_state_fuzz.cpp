// Quarterly bank aggregate, HLRN (bank::*): validate, merge, finish on states read byte for
// byte (as quarter_balance_deserialfn fills them), and accumulate.
//
// Input: [state a: 48 bytes][state b: 48 bytes][at month: int32], then rows of
// [kind: 1 byte][entry month - at: int8][amount in micro-units: int64].
// Properties:
//  - merge of two states validate() accepts is valid and commutative (the same rows, quarter
//    and sums), or throws Error;
//  - finish of a valid state gives deposits + transfers + refunds - charges exactly (in
//    128 bits), or throws Error when that does not fit in 64;
//  - every row accumulate accepts leaves a state validate() accepts; a refused row changes nothing;
//  - rows split over two states and merged give the same row count and quarter as one state
//    (unless a sum overflowed in one of them but not the other: then their rows differ).
#include "state_support.hpp"

#include "core/bank.hpp"

namespace bank = hpcacct::bank;
using bank::State;

namespace {

bool same(const State& x, const State& y) {
    return x.rows == y.rows && x.at_quarter == y.at_quarter && x.at_set == y.at_set && x.deposits == y.deposits &&
           x.charges == y.charges && x.transfers == y.transfers && x.refunds == y.refunds;
}

void check_finish(const State& s) {
    const __int128 exact = static_cast<__int128>(s.deposits) + s.transfers + s.refunds - s.charges;
    const bool fits = exact >= INT64_MIN && exact <= INT64_MAX;
    const auto b = fuzz::attempt([&] { return bank::finish(s); });
    FUZZ_CHECK(b.has_value() == fits, "finish %s a balance that %s", b ? "gives" : "refuses", fits ? "fits" : "overflows");
    if (b) FUZZ_CHECK(b->balance == exact, "finish gives an inexact balance");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const State a = fuzz::read_state<State>(in);
    const State b = fuzz::read_state<State>(in);
    fuzz::check_states(a, b, [](const State& s) { bank::validate(s); },
                       [](State& s, const State& o) { bank::merge(s, o); }, same, check_finish);

    const std::int32_t at = in.take<std::int32_t>();
    const auto validate = [](const State& s) { bank::validate(s); };
    State all{}, part[2]{};
    bool same_rows = true;
    for (int i = 0; in.remaining() > 0; ++i) {
        const auto kind = static_cast<bank::EntryKind>(in.byte() % 4);
        const std::int64_t month = static_cast<std::int64_t>(at) + in.take<std::int8_t>();
        const std::int64_t amount = in.take<std::int64_t>();
        if (month < INT32_MIN || month > INT32_MAX) continue;
        auto row = [&](State& s) { bank::accumulate(s, kind, static_cast<int>(month), amount, at); };
        // A sum that overflows in one state may not in another: then the parts and the
        // whole no longer hold the same rows.
        const bool accepted = fuzz::accumulate_checked(all, validate, row);
        same_rows = fuzz::accumulate_checked(part[i % 2], validate, row) == accepted && same_rows;
    }
    check_finish(all);
    if (!same_rows) return 0;
    State merged = part[0];
    FUZZ_CHECK(fuzz::succeeds([&] { bank::merge(merged, part[1]); }), "merge of two parts fails");
    FUZZ_CHECK(merged.rows == all.rows && merged.at_quarter == all.at_quarter && merged.at_set == all.at_set,
               "merged parts differ from the whole");
    check_finish(merged);
    return 0;
}
