// Quarterly bank aggregate, HLRN (bank::*): validate, merge, finish on states read byte for
// byte (as quarter_balance_deserialfn fills them), and accumulate.
//
// Input: [state a: 80 bytes][state b: 80 bytes][at month: int32], then rows of
// [kind: 1 byte][entry month - at: int8][amount: double].
// Properties:
//  - merge of two states validate() accepts is valid and commutative (the same rows and quarter,
//    sums equal up to rounding), or throws Error;
//  - finish of a valid state gives finite balances, or throws Error;
//  - every row accumulate accepts leaves a state validate() accepts; a refused row changes nothing;
//  - rows split over two states and merged give the same row count and quarter as one state
//    (unless a sum overflowed in one of them but not the other: then their rows differ).
#include "state_support.hpp"

#include "core/bank.hpp"

namespace bank = hpcacct::bank;
using bank::State;

namespace {

bool same(const State& x, const State& y) {
    return x.rows == y.rows && x.at_quarter == y.at_quarter && x.at_set == y.at_set &&
           fuzz::close_sums(x.deposits, y.deposits) && fuzz::close_sums(x.charges, y.charges) &&
           fuzz::close_sums(x.transfers, y.transfers) && fuzz::close_sums(x.refunds, y.refunds);
}

void check_finish(const State& s) {
    const auto b = fuzz::attempt([&] { return bank::finish(s); });
    if (!b) return;
    for (double x : {b->deposits, b->charges, b->transfers, b->refunds, b->balance}) {
        FUZZ_CHECK(std::isfinite(x), "finish gives a non-finite balance (%g)", x);
    }
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
        const double amount = in.take<double>();
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
