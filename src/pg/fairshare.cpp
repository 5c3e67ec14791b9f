// SQL area: fair share (rules §5). The aggregates
//   hpcacct.decayed_usage(ts, amount, at, half_life)              (Slurm: half-life decay)
//   hpcacct.decayed_usage(ts, amount, at, period, decay, depth)   (Maui: decay per period)
// and the factor hpcacct.fairshare_factor(usage, share). The rules are the core's
// (src/core/fairshare.hpp); this file only moves values in and out.
//
// State: `internal`, pointing to the core's flat, fixed-size state (48 or 64 bytes) in the
// aggregate's memory context, with combine, serialize and deserialize functions, as for
// hpcacct.window_quota: nothing outside an aggregate can reach or forge the state, the
// transition function updates it in place, and the only bytes read from outside are the
// deserialize function's, which checks their format and exact size and validates them.
#include "pg/aggregate.hpp"

extern "C" {
#include "utils/timestamp.h"
}

#include "core/fairshare.hpp"

#include <cstdint>

using hpcacct::pg::guarded;
namespace fs = hpcacct::fairshare;

namespace {

constexpr const char* kAggregate = "decayed_usage";

constexpr const char* kRowHint = "Leave rows without a time or amount out with WHERE, or use coalesce(amount, 0).";

std::int64_t finite_timestamp(FunctionCallInfo fcinfo, int argno, const char* name) {
    const TimestampTz value = PG_GETARG_TIMESTAMPTZ(argno);
    if (TIMESTAMP_NOT_FINITE(value)) {
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
                        errmsg("decayed_usage: %s must be a finite timestamp", name)));
    }
    return value;
}

// An interval as microseconds. A month has no fixed length, so a month part is refused, as
// for job lengths; days count 24 hours. Zero or negative lengths are the core's to refuse.
std::int64_t interval_usecs(FunctionCallInfo fcinfo, int argno, const char* name) {
    const Interval* value = PG_GETARG_INTERVAL_P(argno);
    if (value->month != 0) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("decayed_usage: %s must not have a month or year part", name),
                        errhint("Give it in days or hours, e.g. '30 days'.")));
    }
    std::int64_t days = 0, usecs = 0;
    if (__builtin_mul_overflow(static_cast<std::int64_t>(value->day), USECS_PER_DAY, &days) ||
        __builtin_add_overflow(days, value->time, &usecs)) {
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("decayed_usage: %s is too long", name)));
    }
    return usecs;
}

template <typename State>
Datum combine(FunctionCallInfo fcinfo) {
    return hpcacct::pg::combine_states<State>(fcinfo, kAggregate, [](State& a, const State& b) { fs::merge(a, b); });
}

// The states' fields after the format byte (pg/aggregate.hpp): rows, counted, at and the
// length (half-life or period), then the interval form's decay and depth, then the sum.
constexpr int kHalfLifeSize = 4 * 8 + 16;
constexpr int kIntervalSize = 4 * 8 + 8 + 4 + 16;

void send_common(StringInfo buffer, std::int64_t rows, std::int64_t counted, std::int64_t at, std::int64_t length) {
    pq_sendint64(buffer, rows);
    pq_sendint64(buffer, counted);
    pq_sendint64(buffer, at);
    pq_sendint64(buffer, length);
}

template <typename State>
void receive_common(StringInfo buffer, State& state, std::int64_t& length) {
    state.rows = pq_getmsgint64(buffer);
    state.counted = pq_getmsgint64(buffer);
    state.at = pq_getmsgint64(buffer);
    length = pq_getmsgint64(buffer);
}

void send(StringInfo buffer, const fs::HalfLifeState& state) {
    send_common(buffer, state.rows, state.counted, state.at, state.half_life);
    hpcacct::pg::send_sum(buffer, state.sum);
}

void send(StringInfo buffer, const fs::IntervalState& state) {
    send_common(buffer, state.rows, state.counted, state.at, state.period);
    pq_sendfloat8(buffer, state.decay);
    pq_sendint32(buffer, state.depth);
    hpcacct::pg::send_sum(buffer, state.sum);
}

void receive(StringInfo buffer, fs::HalfLifeState& state) {
    receive_common(buffer, state, state.half_life);
    hpcacct::pg::receive_sum(buffer, state.sum);
}

void receive(StringInfo buffer, fs::IntervalState& state) {
    receive_common(buffer, state, state.period);
    state.decay = pq_getmsgfloat8(buffer);
    state.depth = static_cast<std::int32_t>(pq_getmsgint(buffer, 4));
    hpcacct::pg::receive_sum(buffer, state.sum);
}

template <typename State>
Datum serialize(FunctionCallInfo fcinfo) {
    return hpcacct::pg::serialize_state<State>(fcinfo, kAggregate,
                                               [](StringInfo buffer, const State& state) { send(buffer, state); });
}

template <typename State>
Datum deserialize(FunctionCallInfo fcinfo, int size) {
    return hpcacct::pg::deserialize_state<State>(
        fcinfo, kAggregate, size, [](StringInfo buffer, State& state) { receive(buffer, state); },
        [](const State& state) { fs::validate(state); });
}

// NULL when the aggregate saw no rows, as sum() does.
template <typename State>
Datum finish_state(FunctionCallInfo fcinfo) {
    const State* state = hpcacct::pg::final_state<State>(fcinfo, kAggregate);
    if (state == nullptr || fs::empty(*state)) PG_RETURN_NULL();
    PG_RETURN_FLOAT8(guarded([&] { return fs::finish(*state); }));
}

}  // namespace

// The combine, serial, deserial and final functions of one form of decayed_usage (PREFIX_combinefn,
// ...), whose partial state is STATE, serialized in SIZE bytes.
#define HPCACCT_DECAYED_USAGE_SUPPORT(prefix, State, size)                                                    \
    PG_FUNCTION_INFO_V1(prefix##_combinefn);                                                                 \
    Datum prefix##_combinefn(PG_FUNCTION_ARGS) { return combine<State>(fcinfo); }                            \
    PG_FUNCTION_INFO_V1(prefix##_serialfn);                                                                  \
    Datum prefix##_serialfn(PG_FUNCTION_ARGS) { return serialize<State>(fcinfo); }                           \
    PG_FUNCTION_INFO_V1(prefix##_deserialfn);                                                                \
    Datum prefix##_deserialfn(PG_FUNCTION_ARGS) { return deserialize<State>(fcinfo, size); }                 \
    PG_FUNCTION_INFO_V1(prefix##_finalfn);                                                                   \
    Datum prefix##_finalfn(PG_FUNCTION_ARGS) { return finish_state<State>(fcinfo); }

extern "C" {

// decayed_usage_transfn(state internal, ts timestamptz, amount float8, at timestamptz,
// half_life interval). Not strict: a NULL argument is an error (22004), not a row left out.
PG_FUNCTION_INFO_V1(hpcacct_decayed_usage_transfn);
Datum hpcacct_decayed_usage_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, kAggregate);
    hpcacct::pg::require_arguments(fcinfo, kAggregate, {"ts", "amount", "at", "half_life"}, kRowHint);
    const std::int64_t ts = finite_timestamp(fcinfo, 1, "ts");
    const double amount = PG_GETARG_FLOAT8(2);
    const std::int64_t at = finite_timestamp(fcinfo, 3, "at");
    const std::int64_t half_life = interval_usecs(fcinfo, 4, "half_life");

    auto* state = hpcacct::pg::transition_state<fs::HalfLifeState>(fcinfo, context);
    guarded([&] { fs::accumulate(*state, ts, amount, at, half_life); });
    PG_RETURN_POINTER(state);
}

HPCACCT_DECAYED_USAGE_SUPPORT(hpcacct_decayed_usage, fs::HalfLifeState, kHalfLifeSize)

// decayed_usage_periods_transfn(state internal, ts timestamptz, amount float8,
// at timestamptz, period interval, decay float8, depth int4). Not strict, as above.
PG_FUNCTION_INFO_V1(hpcacct_decayed_usage_periods_transfn);
Datum hpcacct_decayed_usage_periods_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, kAggregate);
    hpcacct::pg::require_arguments(fcinfo, kAggregate, {"ts", "amount", "at", "period", "decay", "depth"}, kRowHint);
    const std::int64_t ts = finite_timestamp(fcinfo, 1, "ts");
    const double amount = PG_GETARG_FLOAT8(2);
    const std::int64_t at = finite_timestamp(fcinfo, 3, "at");
    const std::int64_t period = interval_usecs(fcinfo, 4, "period");
    const double decay = PG_GETARG_FLOAT8(5);
    const int depth = PG_GETARG_INT32(6);

    auto* state = hpcacct::pg::transition_state<fs::IntervalState>(fcinfo, context);
    guarded([&] { fs::accumulate(*state, ts, amount, at, period, decay, depth); });
    PG_RETURN_POINTER(state);
}

HPCACCT_DECAYED_USAGE_SUPPORT(hpcacct_decayed_usage_periods, fs::IntervalState, kIntervalSize)

// decay_weight(ts timestamptz, at timestamptz, half_life interval) -> float8: the weight
// decayed_usage gives a row, for the rollups' SQL.
PG_FUNCTION_INFO_V1(hpcacct_decay_weight);
Datum hpcacct_decay_weight(PG_FUNCTION_ARGS) {
    const std::int64_t ts = finite_timestamp(fcinfo, 0, "ts");
    const std::int64_t at = finite_timestamp(fcinfo, 1, "at");
    const std::int64_t half_life = interval_usecs(fcinfo, 2, "half_life");
    PG_RETURN_FLOAT8(guarded([&] { return fs::half_life_weight(ts, at, half_life); }));
}

// fairshare_factor(usage float8, share float8) -> float8: 2^(−usage/share), 0 for share 0.
PG_FUNCTION_INFO_V1(hpcacct_fairshare_factor);
Datum hpcacct_fairshare_factor(PG_FUNCTION_ARGS) {
    const double usage = PG_GETARG_FLOAT8(0);
    const double share = PG_GETARG_FLOAT8(1);
    PG_RETURN_FLOAT8(guarded([&] { return fs::factor(usage, share); }));
}

}  // extern "C"
