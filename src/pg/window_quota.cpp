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
#include "pg/postgres.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "libpq/pqformat.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"  // j2date, which pg/dates.hpp uses
// funcapi.h reaches the spinlock headers, whose `register` C++17 rejects with a warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wregister"
#include "funcapi.h"
#pragma GCC diagnostic pop
}

#include "core/window_quota.hpp"
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"

#include <cstdint>

using hpcacct::pg::aggregate_context;
using hpcacct::pg::guarded;
namespace wq = hpcacct::window_quota;

namespace {

constexpr const char* kAggregate = "window_quota";
constexpr int kSerializedSize = 8 + 4 * 4 + 8 * 8;

void require_row_argument(FunctionCallInfo fcinfo, int argno, const char* name) {
    hpcacct::pg::require_argument(fcinfo, argno, kAggregate, name,
                                  "Give every month of the period a row; use coalesce(x, 0) for a month "
                                  "without allowance or consumption.");
}

}  // namespace

extern "C" {

// window_quota_transfn(state internal, month date, allowance float8, consumed float8, at date).
// Not strict: a NULL argument is an error (22004), not a row silently left out.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_transfn);
Datum hpcacct_window_quota_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = aggregate_context(fcinfo, kAggregate);
    require_row_argument(fcinfo, 1, "month");
    require_row_argument(fcinfo, 2, "allowance");
    require_row_argument(fcinfo, 3, "consumed");
    require_row_argument(fcinfo, 4, "at");
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
    aggregate_context(fcinfo, kAggregate);
    const wq::State* state = reinterpret_cast<const wq::State*>(PG_GETARG_POINTER(0));
    StringInfoData buffer = hpcacct::pg::begin_state();
    pq_sendint64(&buffer, state->rows);
    pq_sendint32(&buffer, state->at);
    pq_sendint32(&buffer, state->at_set);
    pq_sendint32(&buffer, state->first_month);
    pq_sendint32(&buffer, state->last_month);
    for (double value : state->window_allowance) pq_sendfloat8(&buffer, value);
    for (double value : state->window_consumed) pq_sendfloat8(&buffer, value);
    pq_sendfloat8(&buffer, state->total_allowance);
    pq_sendfloat8(&buffer, state->total_consumed);
    PG_RETURN_BYTEA_P(pq_endtypsend(&buffer));
}

// window_quota_deserialfn(bytea, internal) -> internal: checks the exact size and that the
// fields make a state accumulate/merge could have built (window_quota::validate). The result
// lives in the current (per-call) context; the combine function copies it into the aggregate
// context when it keeps it.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_deserialfn);
Datum hpcacct_window_quota_deserialfn(PG_FUNCTION_ARGS) {
    aggregate_context(fcinfo, kAggregate);
    StringInfoData buffer = hpcacct::pg::serialized_state(fcinfo, kSerializedSize, kAggregate);
    auto* state = static_cast<wq::State*>(palloc0(sizeof(wq::State)));
    state->rows = pq_getmsgint64(&buffer);
    state->at = static_cast<std::int32_t>(pq_getmsgint(&buffer, 4));
    state->at_set = static_cast<std::int32_t>(pq_getmsgint(&buffer, 4));
    state->first_month = static_cast<std::int32_t>(pq_getmsgint(&buffer, 4));
    state->last_month = static_cast<std::int32_t>(pq_getmsgint(&buffer, 4));
    for (double& value : state->window_allowance) value = pq_getmsgfloat8(&buffer);
    for (double& value : state->window_consumed) value = pq_getmsgfloat8(&buffer);
    state->total_allowance = pq_getmsgfloat8(&buffer);
    state->total_consumed = pq_getmsgfloat8(&buffer);
    pq_getmsgend(&buffer);
    guarded([&] { wq::validate(*state); });
    PG_RETURN_POINTER(state);
}

// window_quota_finalfn(internal) -> hpcacct.quota; NULL when the aggregate saw no rows.
PG_FUNCTION_INFO_V1(hpcacct_window_quota_finalfn);
Datum hpcacct_window_quota_finalfn(PG_FUNCTION_ARGS) {
    aggregate_context(fcinfo, kAggregate);
    if (PG_ARGISNULL(0)) PG_RETURN_NULL();
    const wq::State* state = reinterpret_cast<const wq::State*>(PG_GETARG_POINTER(0));
    if (wq::empty(*state)) PG_RETURN_NULL();

    TupleDesc desc = nullptr;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("window_quota must return a composite type")));
    }
    // hpcacct.quota as the install script creates it: five float8 fields and a text.
    bool layout_ok = desc->natts == 6;
    for (int i = 0; layout_ok && i < 6; ++i) {
        const Form_pg_attribute attribute = TupleDescAttr(desc, i);
        layout_ok = !attribute->attisdropped && attribute->atttypid == (i < 5 ? FLOAT8OID : TEXTOID);
    }
    if (!layout_ok) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                        errmsg("type hpcacct.quota does not have the fields window_quota returns"),
                        errdetail("Expected (monthly, remaining_prev, consumed_current, consumable_pct, consumable "
                                  "float8, state text).")));
    }

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
    HeapTuple tuple = heap_form_tuple(BlessTupleDesc(desc), values, nulls);
    PG_RETURN_DATUM(HeapTupleGetDatum(tuple));
}

}  // extern "C"
