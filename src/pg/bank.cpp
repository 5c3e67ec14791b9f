// SQL area: the quarterly bank aggregate hpcacct.quarter_balance(kind, quarter, amount, at)
// -> hpcacct.bank_balance (rules §4, HLRN). The rule is the core's (src/core/bank.hpp).
//
// Amounts are numeric and counted exactly, in integer micro-units (the core parses numeric's
// text form; the results are numerics of scale 6 built from the integers). The aggregate of
// 0.3 declared its amount and results float8, and an installation runs it with this library
// until ALTER EXTENSION UPDATE: the functions look at the declared types and serve both.
//
// State: `internal`, the core's flat bank::State in the aggregate context, updated in place;
// serialized as every aggregate state is (pg/aggregate.hpp), deserialize checks it and runs
// bank::validate (the same design as window_quota.cpp, for the same reasons).
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wregister"
#include "funcapi.h"
#pragma GCC diagnostic pop
}

#include "core/bank.hpp"

using hpcacct::pg::guarded;
namespace bank = hpcacct::bank;

namespace {

constexpr const char* kAggregate = "quarter_balance";

constexpr int kSerializedSize = 8 + 4 + 4 + 4 * 8;

// First day of a quarter index (year * 4 + quarter - 1).
DateADT quarter_start(int quarter) {
    const int year = quarter >= 0 ? quarter / 4 : -((-quarter + 3) / 4);
    const int month = (quarter - year * 4) * 3 + 1;
    return date2j(year, month, 1) - POSTGRES_EPOCH_JDATE;
}

// Micro-units as a numeric of scale 6.
Datum numeric_of_micro_units(int64 micro) { return NumericGetDatum(int64_div_fast_to_numeric(micro, 6)); }

// The type of the result's amounts: numeric, or float8 for 0.3's declaration of bank_balance.
Oid result_amount_type(FunctionCallInfo fcinfo) {
    TupleDesc desc = nullptr;
    if (get_call_result_type(fcinfo, nullptr, &desc) == TYPEFUNC_COMPOSITE && desc->natts == 6 &&
        TupleDescAttr(desc, 1)->atttypid == FLOAT8OID) {
        return FLOAT8OID;
    }
    return NUMERICOID;
}

}  // namespace

extern "C" {

// quarter_balance_transfn(state internal, kind text, quarter date, amount numeric, at date).
// Not strict: NULL arguments are an error (22004), not rows silently left out.
PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_transfn);
Datum hpcacct_quarter_balance_transfn(PG_FUNCTION_ARGS) {
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, kAggregate);
    hpcacct::pg::require_arguments(fcinfo, kAggregate, {"kind", "quarter", "amount", "at"});
    text* kind_text = PG_GETARG_TEXT_PP(1);
    const std::string_view kind_name(VARDATA_ANY(kind_text), VARSIZE_ANY_EXHDR(kind_text));
    const int entry_month = hpcacct::pg::month_index(PG_GETARG_DATEADT(2), "quarter_balance: quarter");
    const bool float_amount = get_fn_expr_argtype(fcinfo->flinfo, 3) == FLOAT8OID;  // 0.3's declaration
    // numeric's own text form: the core counts it exactly
    const char* amount_text =
        float_amount ? nullptr : DatumGetCString(DirectFunctionCall1(numeric_out, PG_GETARG_DATUM(3)));
    const double float_value = float_amount ? PG_GETARG_FLOAT8(3) : 0;
    const int at_month = hpcacct::pg::derived_once<DateADT, int>(fcinfo, PG_GETARG_DATEADT(4), [](DateADT day) {
        return hpcacct::pg::month_index(day, "quarter_balance: at");
    });

    bank::State* state = hpcacct::pg::transition_state<bank::State>(fcinfo, context);
    guarded([&] {
        const std::int64_t micro =
            float_amount ? bank::micro_units_of_double(float_value) : bank::parse_micro_units(amount_text);
        bank::accumulate(*state, bank::parse_entry_kind(kind_name), entry_month, micro, at_month);
    });
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
        for (const std::int64_t sum : {state.deposits, state.charges, state.transfers, state.refunds})
            pq_sendint64(buffer, sum);
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
                *sum = pq_getmsgint64(buffer);
        },
        bank::validate);
}

// quarter_balance_finalfn(internal) -> hpcacct.bank_balance; NULL when there were no rows.
PG_FUNCTION_INFO_V1(hpcacct_quarter_balance_finalfn);
Datum hpcacct_quarter_balance_finalfn(PG_FUNCTION_ARGS) {
    const bank::State* state = hpcacct::pg::final_state<bank::State>(fcinfo, kAggregate);
    if (state == nullptr || state->rows == 0) PG_RETURN_NULL();
    const Oid amount_type = result_amount_type(fcinfo);
    TupleDesc desc = hpcacct::pg::composite_result(fcinfo, kAggregate, "hpcacct.bank_balance",
                                                   {DATEOID, amount_type, amount_type, amount_type, amount_type,
                                                    amount_type});
    const bank::Balance balance = guarded([&] { return bank::finish(*state); });
    const auto amount = [amount_type](int64 micro) {
        return amount_type == FLOAT8OID ? Float8GetDatum(static_cast<double>(micro) / 1e6) : numeric_of_micro_units(micro);
    };
    Datum values[6] = {DateADTGetDatum(quarter_start(balance.quarter)), amount(balance.deposits),
                       amount(balance.charges),  amount(balance.transfers),
                       amount(balance.refunds),  amount(balance.balance)};
    bool nulls[6] = {false, false, false, false, false, false};
    PG_RETURN_DATUM(hpcacct::pg::composite_datum(desc, values, nulls));
}

}  // extern "C"
