// Decayed-usage aggregates, fair share (fairshare::*): validate, merge, finish on states read
// byte for byte (as the deserialize functions fill them), accumulate, and factor.
//
// Input: [form: 1 byte] then, for the half-life form,
//   [state a: 48 bytes][state b: 48 bytes][at: int64][half-life: int64]
// and for the interval form
//   [state a: 64 bytes][state b: 64 bytes][at: int64][period: int64][decay: double][depth: int32]
// then rows of [at - ts: int64][amount: double], and finally [usage: double][share: double].
// Properties:
//  - merge of two states validate() accepts is valid and commutative (the same counts and
//    parameters, usage equal up to rounding), or throws Error;
//  - finish of a valid non-empty state is a finite, non-negative usage, or throws Error;
//  - every row accumulate accepts leaves a state validate() accepts; a refused row changes nothing;
//  - rows split over two states and merged give the same row counts as one state (unless a
//    sum overflowed in only one of them);
//  - factor(usage, share) is in [0, 1], or throws Error.
#include "state_support.hpp"

#include "core/fairshare.hpp"

namespace fs = hpcacct::fairshare;

namespace {

template <typename State>
void check_finish(const State& s) {
    if (fs::empty(s)) return;
    const auto usage = fuzz::attempt([&] { return fs::finish(s); });
    if (usage) FUZZ_CHECK(std::isfinite(*usage) && *usage >= 0, "finish gives the usage %g", *usage);
}

bool same(const fs::HalfLifeState& x, const fs::HalfLifeState& y) {
    return x.rows == y.rows && x.counted == y.counted && x.at == y.at && x.half_life == y.half_life &&
           fuzz::close_sums(x.sum, y.sum);
}

bool same(const fs::IntervalState& x, const fs::IntervalState& y) {
    return x.rows == y.rows && x.counted == y.counted && x.at == y.at && x.period == y.period &&
           x.decay == y.decay && x.depth == y.depth && fuzz::close_sums(x.sum, y.sum);
}

// Rows are read until 16 bytes remain: those are factor's arguments.
template <typename State, typename Row>
void check_rows(fuzz::Reader& in, Row accumulate) {
    const auto validate = [](const State& s) { fs::validate(s); };
    State all{}, part[2]{};
    bool same_rows = true;
    for (int i = 0; in.remaining() > 16; ++i) {
        const std::int64_t age = in.take<std::int64_t>();
        const double amount = in.take<double>();
        auto row = [&](State& s) { accumulate(s, age, amount); };
        // A sum that overflows in one state may not in another: then the parts and the
        // whole no longer hold the same rows.
        const bool accepted = fuzz::accumulate_checked(all, validate, row);
        same_rows = fuzz::accumulate_checked(part[i % 2], validate, row) == accepted && same_rows;
    }
    check_finish(all);
    if (!same_rows) return;
    State merged = part[0];
    FUZZ_CHECK(fuzz::succeeds([&] { fs::merge(merged, part[1]); }), "merge of two parts fails");
    FUZZ_CHECK(merged.rows == all.rows && merged.counted == all.counted, "merged parts differ from the whole");
    check_finish(merged);
}

// ts = at - age, or no row when that overflows.
bool timestamp(std::int64_t at, std::int64_t age, std::int64_t& ts) { return !__builtin_sub_overflow(at, age, &ts); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    if (in.byte() % 2 == 0) {
        using State = fs::HalfLifeState;
        const State a = fuzz::read_state<State>(in);
        const State b = fuzz::read_state<State>(in);
        fuzz::check_states(a, b, [](const State& s) { fs::validate(s); },
                           [](State& s, const State& o) { fs::merge(s, o); },
                           [](const State& x, const State& y) { return same(x, y); }, check_finish<State>);
        const std::int64_t at = in.take<std::int64_t>();
        const std::int64_t half_life = in.take<std::int64_t>();
        check_rows<State>(in, [&](State& s, std::int64_t age, double amount) {
            std::int64_t ts;
            if (!timestamp(at, age, ts)) throw hpcacct::Error(hpcacct::ErrorKind::invalid_argument, "no row");
            fs::accumulate(s, ts, amount, at, half_life);
        });
    } else {
        using State = fs::IntervalState;
        const State a = fuzz::read_state<State>(in);
        const State b = fuzz::read_state<State>(in);
        fuzz::check_states(a, b, [](const State& s) { fs::validate(s); },
                           [](State& s, const State& o) { fs::merge(s, o); },
                           [](const State& x, const State& y) { return same(x, y); }, check_finish<State>);
        const std::int64_t at = in.take<std::int64_t>();
        const std::int64_t period = in.take<std::int64_t>();
        const double decay = in.take<double>();
        const std::int32_t depth = in.take<std::int32_t>();
        check_rows<State>(in, [&](State& s, std::int64_t age, double amount) {
            std::int64_t ts;
            if (!timestamp(at, age, ts)) throw hpcacct::Error(hpcacct::ErrorKind::invalid_argument, "no row");
            fs::accumulate(s, ts, amount, at, period, decay, depth);
        });
    }

    const double usage = in.take<double>();
    const double share = in.take<double>();
    const auto f = fuzz::attempt([&] { return fs::factor(usage, share); });
    if (f) FUZZ_CHECK(*f >= 0 && *f <= 1, "factor(%g, %g) = %g", usage, share, *f);
    return 0;
}
