// SQL area: the quarterly bank aggregate hpcacct.quarter_balance(kind, quarter, amount, at)
// -> hpcacct.bank_balance (rules §4, HLRN). The rule is the core's (src/core/bank.hpp).
//
// State: `internal`, the core's flat bank::State in the aggregate context, updated in place;
// serialized as every aggregate state is (pg/aggregate.hpp), deserialize checks it and runs
// bank::validate (the same design as window_quota.cpp, for the same reasons).
#include "pg/postgres.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "libpq/pqformat.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wregister"
#include "funcapi.h"
#pragma GCC diagnostic pop
}

#include "core/bank.hpp"
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"


using hpcacct::pg::aggregate_context;
using hpcacct::pg::guarded;
using hpcacct::pg::require_argument;
namespace bank = hpcacct::bank;

namespace {

constexpr const char* kAggregate = "quarter_balance";

constexpr int kSerializedSize = 8 + 4 + 4 + 4 * 16;

// First day of a quarter index (year * 4 + quarter - 1).
DateADT quarter_start(int quarter) {
    const int year = quarter >= 0 ? quarter / 4 : -((-quarter + 3) / 4);
    const int month = (quarter - year * 4) * 3 + 1;
    return date2j(year, month, 1) - POSTGRES_EPOCH_JDATE;
}

}  // namespace

extern "C" {

// quarter_balance_transfn(state internal, kind text, quarter date, amount float8, at date).
// Not strict: NULL arguments are an error (22004), not rows silently left out.
PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_transfn);
Datum hpcacct_quarter_balance_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = aggregate_context(fcinfo, kAggregate);
    require_argument(fcinfo, 1, kAggregate, "kind");
    require_argument(fcinfo, 2, kAggregate, "quarter");
    require_argument(fcinfo, 3, kAggregate, "amount");
    require_argument(fcinfo, 4, kAggregate, "at");
    text* kind_text = PG_GETARG_TEXT_PP(1);
    const std::string_view kind_name(VARDATA_ANY(kind_text), VARSIZE_ANY_EXHDR(kind_text));
    const int entry_month = hpcacct::pg::month_index(PG_GETARG_DATEADT(2), "quarter_balance: quarter");
    const double amount = PG_GETARG_FLOAT8(3);
    const int at_month = hpcacct::pg::derived_once<DateADT, int>(fcinfo, PG_GETARG_DATEADT(4), [](DateADT day) {
        return hpcacct::pg::month_index(day, "quarter_balance: at");
    });

    bank::State* state = hpcacct::pg::transition_state<bank::State>(fcinfo, context);
    guarded([&] { bank::accumulate(*state, bank::parse_entry_kind(kind_name), entry_month, amount, at_month); });
    PG_RETURN_POINTER(state);
}

PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_combinefn);
Datum hpcacct_quarter_balance_combinefn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::combine_states<bank::State>(fcinfo, kAggregate, bank::merge);
}

PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_serialfn);
Datum hpcacct_quarter_balance_serialfn(PG_FUNCTION_ARGS) {
    aggregate_context(fcinfo, kAggregate);
    const bank::State* state = reinterpret_cast<const bank::State*>(PG_GETARG_POINTER(0));
    StringInfoData buffer = hpcacct::pg::begin_state();
    pq_sendint64(&buffer, state->rows);
    pq_sendint32(&buffer, state->at_quarter);
    pq_sendint32(&buffer, state->at_set);
    hpcacct::pg::send_sum(&buffer, state->deposits);
    hpcacct::pg::send_sum(&buffer, state->charges);
    hpcacct::pg::send_sum(&buffer, state->transfers);
    hpcacct::pg::send_sum(&buffer, state->refunds);
    PG_RETURN_BYTEA_P(pq_endtypsend(&buffer));
}

PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_deserialfn);
Datum hpcacct_quarter_balance_deserialfn(PG_FUNCTION_ARGS) {
    aggregate_context(fcinfo, kAggregate);
    StringInfoData buffer = hpcacct::pg::serialized_state(fcinfo, kSerializedSize, kAggregate);
    auto* state = static_cast<bank::State*>(palloc0(sizeof(bank::State)));
    state->rows = pq_getmsgint64(&buffer);
    state->at_quarter = static_cast<int32>(pq_getmsgint(&buffer, 4));
    state->at_set = static_cast<int32>(pq_getmsgint(&buffer, 4));
    hpcacct::pg::receive_sum(&buffer, state->deposits);
    hpcacct::pg::receive_sum(&buffer, state->charges);
    hpcacct::pg::receive_sum(&buffer, state->transfers);
    hpcacct::pg::receive_sum(&buffer, state->refunds);
    pq_getmsgend(&buffer);
    guarded([&] { bank::validate(*state); });
    PG_RETURN_POINTER(state);
}

// quarter_balance_finalfn(internal) -> hpcacct.bank_balance; NULL when there were no rows.
PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_finalfn);
Datum hpcacct_quarter_balance_finalfn(PG_FUNCTION_ARGS) {
    aggregate_context(fcinfo, kAggregate);
    if (PG_ARGISNULL(0)) PG_RETURN_NULL();
    const bank::State* state = reinterpret_cast<const bank::State*>(PG_GETARG_POINTER(0));
    if (state->rows == 0) PG_RETURN_NULL();

    TupleDesc desc = nullptr;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("quarter_balance must return a composite type")));
    }
    bool layout_ok = desc->natts == 6;
    for (int i = 0; layout_ok && i < 6; ++i) {
        const Form_pg_attribute attribute = TupleDescAttr(desc, i);
        layout_ok = !attribute->attisdropped && attribute->atttypid == (i == 0 ? DATEOID : FLOAT8OID);
    }
    if (!layout_ok) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                        errmsg("type hpcacct.bank_balance does not have the fields quarter_balance returns")));
    }

    const bank::Balance balance = guarded([&] { return bank::finish(*state); });
    Datum values[6] = {DateADTGetDatum(quarter_start(balance.quarter)), Float8GetDatum(balance.deposits),
                       Float8GetDatum(balance.charges),  Float8GetDatum(balance.transfers),
                       Float8GetDatum(balance.refunds),  Float8GetDatum(balance.balance)};
    bool nulls[6] = {false, false, false, false, false, false};
    HeapTuple tuple = heap_form_tuple(BlessTupleDesc(desc), values, nulls);
    PG_RETURN_DATUM(HeapTupleGetDatum(tuple));
}

}  // extern "C"
