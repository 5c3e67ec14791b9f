// SQL area: the sliding-window quota aggregate hpcacct.window_quota(month, allowance,
// consumed, at) -> hpcacct.quota (rules §3, RWTH). The rule is the core's
// (src/core/window_quota.hpp); this file only moves values in and out.
//
// State: `internal`, pointing to the core's flat 88-byte window_quota::State allocated in the
// aggregate's memory context, with combine, serialize and deserialize functions. Chosen over
// a fixed-length SQL type of 88 bytes because such a type would need text and binary I/O of
// its own and would make the state a value any user can build and hand to the combine and
// final functions; with `internal` nothing outside an aggregate can reach the state, the
// transition function updates it in place (no copy per row), and the only bytes read from
// outside are the deserialize function's, which checks their exact size and runs
// window_quota::validate on them.
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/builtins.h"
}

#include "core/window_quota.hpp"

using hpcacct::pg::guarded;
namespace wq = hpcacct::window_quota;

namespace {

constexpr const char* kAggregate = "window_quota";
constexpr int kSerializedSize = 8 + 4 * 4 + 8 * 8;

constexpr const char* kRowHint =
    "Give every month of the period a row; use coalesce(x, 0) for a month without allowance or consumption.";

}  // namespace

extern "C" {

// window_quota_transfn(state internal, month date, allowance float8, consumed float8, at date).
// Not strict: a NULL argument is an error (22004), not a row silently left out.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_transfn);
Datum hpcacct_window_quota_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, kAggregate);
    hpcacct::pg::require_arguments(fcinfo, kAggregate, {"month", "allowance", "consumed", "at"}, kRowHint);
    const int month = hpcacct::pg::month_index(PG_GETARG_DATEADT(1), "window_quota: month");
    const double allowance = PG_GETARG_FLOAT8(2);
    const double consumed = PG_GETARG_FLOAT8(3);
    const int at = hpcacct::pg::derived_once<DateADT, int>(fcinfo, PG_GETARG_DATEADT(4), [](DateADT day) {
        return hpcacct::pg::month_index(day, "window_quota: at");
    });

    wq::State* state = hpcacct::pg::transition_state<wq::State>(fcinfo, context);
    guarded([&] { wq::accumulate(*state, month, allowance, consumed, at); });
    PG_RETURN_POINTER(state);
}

// window_quota_combinefn(internal, internal): merges the second state into the first. Not
// strict (PostgreSQL requires that for `internal` states): a NULL first state becomes a copy
// of the second in the aggregate context, since the second may live in a shorter context.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_combinefn);
Datum hpcacct_window_quota_combinefn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::combine_states<wq::State>(fcinfo, kAggregate, wq::merge);
}

// window_quota_serialfn(internal) -> bytea: the State's fields (8 + 4 x 4 + 8 x 8 = 88 bytes)
// after the format byte, as every aggregate state is serialized (pg/aggregate.hpp).
PG_FUNCTION_INFO_V1(hpcacct_window_quota_serialfn);
Datum hpcacct_window_quota_serialfn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::serialize_state<wq::State>(fcinfo, kAggregate, [](StringInfo buffer, const wq::State& state) {
        pq_sendint64(buffer, state.rows);
        for (std::int32_t field : {state.at, state.at_set, state.first_month, state.last_month})
            pq_sendint32(buffer, field);
        for (double value : state.window_allowance) pq_sendfloat8(buffer, value);
        for (double value : state.window_consumed) pq_sendfloat8(buffer, value);
        pq_sendfloat8(buffer, state.total_allowance);
        pq_sendfloat8(buffer, state.total_consumed);
    });
}

// window_quota_deserialfn(bytea, internal) -> internal: checks the exact size and that the
// fields make a state accumulate/merge could have built (window_quota::validate).
PG_FUNCTION_INFO_V1(hpcacct_window_quota_deserialfn);
Datum hpcacct_window_quota_deserialfn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::deserialize_state<wq::State>(
        fcinfo, kAggregate, kSerializedSize,
        [](StringInfo buffer, wq::State& state) {
            state.rows = pq_getmsgint64(buffer);
            for (std::int32_t* field : {&state.at, &state.at_set, &state.first_month, &state.last_month})
                *field = static_cast<std::int32_t>(pq_getmsgint(buffer, 4));
            for (double& value : state.window_allowance) value = pq_getmsgfloat8(buffer);
            for (double& value : state.window_consumed) value = pq_getmsgfloat8(buffer);
            state.total_allowance = pq_getmsgfloat8(buffer);
            state.total_consumed = pq_getmsgfloat8(buffer);
        },
        wq::validate);
}

// window_quota_finalfn(internal) -> hpcacct.quota; NULL when the aggregate saw no rows.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_finalfn);
Datum hpcacct_window_quota_finalfn(PG_FUNCTION_ARGS) {
    const wq::State* state = hpcacct::pg::final_state<wq::State>(fcinfo, kAggregate);
    if (state == nullptr || wq::empty(*state)) PG_RETURN_NULL();
    // hpcacct.quota as the install script creates it: five float8 fields and a text.
    TupleDesc desc = hpcacct::pg::composite_result(
        fcinfo, kAggregate, "hpcacct.quota", {FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TEXTOID},
        "Expected (monthly, remaining_prev, consumed_current, consumable_pct, consumable float8, state text).");

    const wq::Quota quota = guarded([&] { return wq::finish(*state); });
    const char* state_name = guarded([&] { return wq::to_string(quota.state); });

    Datum values[6];
    bool nulls[6] = {false, false, false, false, false, false};
    values[0] = Float8GetDatum(quota.monthly);
    values[1] = Float8GetDatum(quota.remaining_prev);
    values[2] = Float8GetDatum(quota.consumed_current);
    values[3] = Float8GetDatum(quota.consumable_pct);
    nulls[3] = !quota.consumable_pct_defined;
    values[4] = Float8GetDatum(quota.consumable);
    values[5] = CStringGetTextDatum(state_name);
    PG_RETURN_DATUM(hpcacct::pg::composite_datum(desc, values, nulls));
}

}  // extern "C"
