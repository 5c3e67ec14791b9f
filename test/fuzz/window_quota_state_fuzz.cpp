// Sliding-window quota aggregate, RWTH (window_quota::*): validate, merge, finish on states
// read byte for byte (as window_quota_deserialfn fills them), and accumulate.
//
// Input: [state a: 88 bytes][state b: 88 bytes][at: int32], then rows of
// [month - at: int8][allowance: double][consumed: double].
// Properties:
//  - merge of two states validate() accepts is commutative (byte for byte) and valid, or
//    throws Error;
//  - finish of a valid non-empty state gives finite numbers and a known status;
//  - every row accumulate accepts leaves a state validate() accepts; a refused row changes nothing;
//  - rows accumulated into two states (alternately) and merged give the same rows, period,
//    and (up to rounding) the same totals as all rows accumulated into one state.
#include "state_support.hpp"

#include "core/window_quota.hpp"

namespace wq = hpcacct::window_quota;
using wq::State;

namespace {

void check_finish(const State& s) {
    if (wq::empty(s)) return;
    const auto q = fuzz::attempt([&] { return wq::finish(s); });
    FUZZ_CHECK(q.has_value(), "finish refuses a valid non-empty state");
    for (double x : {q->monthly, q->remaining_prev, q->consumed_current, q->consumable, q->consumable_pct}) {
        FUZZ_CHECK(std::isfinite(x), "finish gives a non-finite number");
    }
    (void)wq::to_string(q->state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const State a = fuzz::read_state<State>(in);
    const State b = fuzz::read_state<State>(in);
    fuzz::check_states(
        a, b, [](const State& s) { wq::validate(s); }, [](State& s, const State& o) { wq::merge(s, o); },
        [](const State& x, const State& y) { return fuzz::same_bytes(x, y); }, check_finish);

    const std::int32_t at = in.take<std::int32_t>();
    State all{}, part[2]{};
    for (int i = 0; in.remaining() > 0; ++i) {
        const std::int64_t month = static_cast<std::int64_t>(at) + in.take<std::int8_t>();
        const double allowance = in.take<double>();
        const double consumed = in.take<double>();
        if (month < INT32_MIN || month > INT32_MAX) continue;
        auto row = [&](State& s) { wq::accumulate(s, static_cast<int>(month), allowance, consumed, at); };
        const auto validate = [](const State& s) { wq::validate(s); };
        const bool accepted = fuzz::accumulate_checked(all, validate, row);
        FUZZ_CHECK(fuzz::accumulate_checked(part[i % 2], validate, row) == accepted, "row accepted only once");
    }
    check_finish(all);
    State merged = part[0];
    FUZZ_CHECK(fuzz::succeeds([&] { wq::merge(merged, part[1]); }), "merge of two parts fails");
    FUZZ_CHECK(merged.rows == all.rows && merged.first_month == all.first_month &&
                   merged.last_month == all.last_month && merged.at == all.at && merged.at_set == all.at_set,
               "merged parts differ from the whole");
    FUZZ_CHECK(fuzz::close(merged.total_allowance, all.total_allowance) &&
                   fuzz::close(merged.total_consumed, all.total_consumed),
               "merged totals differ from the whole");
    for (int i = 0; i < 3; ++i) {
        FUZZ_CHECK(fuzz::close(merged.window_allowance[i], all.window_allowance[i]) &&
                       fuzz::close(merged.window_consumed[i], all.window_consumed[i]),
                   "merged window differs from the whole");
    }
    return 0;
}
