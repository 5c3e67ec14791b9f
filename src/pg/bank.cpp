// SQL area: the quarterly bank aggregate hpcacct.quarter_balance(kind, quarter, amount, at)
// -> hpcacct.bank_balance (rules §4, HLRN). The rule is the core's (src/core/bank.hpp).
//
// State: `internal`, the core's flat bank::State in the aggregate context, updated in place;
// serialized as every aggregate state is (pg/aggregate.hpp), deserialize checks it and runs
// bank::validate (the same design as window_quota.cpp, for the same reasons).
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

#include "core/bank.hpp"

using hpcacct::pg::guarded;
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
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, kAggregate);
    hpcacct::pg::require_arguments(fcinfo, kAggregate, {"kind", "quarter", "amount", "at"});
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
    return hpcacct::pg::serialize_state<bank::State>(fcinfo, kAggregate, [](StringInfo buffer, const bank::State& state) {
        pq_sendint64(buffer, state.rows);
        pq_sendint32(buffer, state.at_quarter);
        pq_sendint32(buffer, state.at_set);
        for (const auto* sum : {&state.deposits, &state.charges, &state.transfers, &state.refunds})
            hpcacct::pg::send_sum(buffer, *sum);
    });
}

PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_deserialfn);
Datum hpcacct_quarter_balance_deserialfn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::deserialize_state<bank::State>(
        fcinfo, kAggregate, kSerializedSize,
        [](StringInfo buffer, bank::State& state) {
            state.rows = pq_getmsgint64(buffer);
            state.at_quarter = static_cast<int32>(pq_getmsgint(buffer, 4));
            state.at_set = static_cast<int32>(pq_getmsgint(buffer, 4));
            for (auto* sum : {&state.deposits, &state.charges, &state.transfers, &state.refunds})
                hpcacct::pg::receive_sum(buffer, *sum);
        },
        bank::validate);
}

// quarter_balance_finalfn(internal) -> hpcacct.bank_balance; NULL when there were no rows.
PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_finalfn);
Datum hpcacct_quarter_balance_finalfn(PG_FUNCTION_ARGS) {
    const bank::State* state = hpcacct::pg::final_state<bank::State>(fcinfo, kAggregate);
    if (state == nullptr || state->rows == 0) PG_RETURN_NULL();
    TupleDesc desc = hpcacct::pg::composite_result(fcinfo, kAggregate, "hpcacct.bank_balance",
                                                   {DATEOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID});
    const bank::Balance balance = guarded([&] { return bank::finish(*state); });
    Datum values[6] = {DateADTGetDatum(quarter_start(balance.quarter)), Float8GetDatum(balance.deposits),
                       Float8GetDatum(balance.charges),  Float8GetDatum(balance.transfers),
                       Float8GetDatum(balance.refunds),  Float8GetDatum(balance.balance)};
    bool nulls[6] = {false, false, false, false, false, false};
    PG_RETURN_DATUM(hpcacct::pg::composite_datum(desc, values, nulls));
}

}  // extern "C"
