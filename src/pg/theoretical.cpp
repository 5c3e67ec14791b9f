// SQL area: GENCI/IDRIS theoretical consumption (rules §2) — the aggregates hpcacct.tmc and
// hpcacct.tc over allocation events, and hpcacct.regulation_status.
//
// Aggregate state: the core's theoretical::State (a flat, trivially copyable 24 bytes: a
// Neumaier sum, and the date "at" and convention every row must share) allocated in the
// aggregate memory context and passed as `internal`. It cannot be a by-value Datum; a
// by-reference SQL type would need its own I/O functions and would be copied on every row,
// whereas an internal state is updated in place. Partial states cross process (and, with
// Citus or postgres_fdw, node) boundaries as two float8 and two int4 in network byte order;
// deserialize checks the size and runs theoretical::validate.
//
// The transition functions are not STRICT: a NULL valid_from, valid_until, amount, at or
// convention is an error (22004) rather than a row silently skipped, since a skipped
// allocation event would make TMC and TC wrong without anyone noticing.
#include "pg/aggregate.hpp"
#include "pg/dates.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include "core/theoretical.hpp"

#include <string_view>

using hpcacct::pg::supported_day;
using hpcacct::pg::guarded;
namespace calendar = hpcacct::calendar;
namespace theoretical = hpcacct::theoretical;
using theoretical::State;

namespace {

constexpr int kSerializedSize = 2 * sizeof(float8) + 2 * sizeof(int32);

enum class Measure { tmc, tc };

constexpr const char* kSupportedAggregates = "hpcacct.tmc or hpcacct.tc";

Datum transition(FunctionCallInfo fcinfo, Measure measure, bool with_convention) {
    const char* const function = measure == Measure::tmc ? "hpcacct.tmc" : "hpcacct.tc";
    MemoryContext context = hpcacct::pg::aggregate_context(fcinfo, function);
    static const char* const arguments[] = {"valid_from", "valid_until", "amount", "at", "convention"};
    const int last = with_convention ? 5 : 4;
    for (int i = 1; i <= last; ++i) {
        hpcacct::pg::require_argument(fcinfo, i, function, arguments[i - 1],
                         "Every allocation event needs a validity window, an amount and a date.");
    }
    // Dates stay day counts (the core splits them with integer arithmetic only when it needs
    // their months; `at` is split once per query); the errors are supported_day's, in the
    // same order (valid_from, valid_until, at).
    const DateADT from = supported_day(PG_GETARG_DATEADT(1), "valid_from");
    const DateADT until = supported_day(PG_GETARG_DATEADT(2), "valid_until");
    const double amount = PG_GETARG_FLOAT8(3);
    const calendar::Day at = hpcacct::pg::derived_once<DateADT, calendar::Day>(
        fcinfo, PG_GETARG_DATEADT(4), [](DateADT day) { return calendar::day_of(supported_day(day, "at")); });
    std::string_view convention_name;
    if (with_convention) {
        text* name = PG_GETARG_TEXT_PP(5);
        convention_name = std::string_view(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
    }
    State* state = hpcacct::pg::transition_state<State>(fcinfo, context);
    guarded([&] {
        const calendar::MonthConvention convention = with_convention
                                                         ? calendar::parse_month_convention(convention_name)
                                                         : calendar::MonthConvention::half_month;
        theoretical::accept_row(*state, at.days, convention);
        state->sum.add(measure == Measure::tmc ? theoretical::tmc_contribution(from, until, amount, at, convention)
                                           : theoretical::tc_contribution(from, until, amount, at, convention));
    });
    PG_RETURN_POINTER(state);
}

}  // namespace

extern "C" {

PG_FUNCTION_INFO_V1(hpcacct_tmc_transfn);
Datum hpcacct_tmc_transfn(PG_FUNCTION_ARGS) {
    return transition(fcinfo, Measure::tmc, PG_NARGS() > 5);
}

PG_FUNCTION_INFO_V1(hpcacct_tc_transfn);
Datum hpcacct_tc_transfn(PG_FUNCTION_ARGS) {
    return transition(fcinfo, Measure::tc, PG_NARGS() > 5);
}

// Merges the second state into the first; either may be NULL (a worker that saw no row).
PG_FUNCTION_INFO_V1(hpcacct_theoretical_combinefn);
Datum hpcacct_theoretical_combinefn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::combine_states<State>(fcinfo, kSupportedAggregates,
                                              [](State& state, const State& other) { theoretical::merge(state, other); });
}

// The sum; NULL when the aggregate saw no row (as sum() does).
PG_FUNCTION_INFO_V1(hpcacct_theoretical_finalfn);
Datum hpcacct_theoretical_finalfn(PG_FUNCTION_ARGS) {
    const State* state = hpcacct::pg::final_state<State>(fcinfo, kSupportedAggregates);
    if (state == nullptr) PG_RETURN_NULL();
    PG_RETURN_FLOAT8(guarded([&] { return state->sum.value(); }));
}

PG_FUNCTION_INFO_V1(hpcacct_theoretical_serialfn);
Datum hpcacct_theoretical_serialfn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::serialize_state<State>(fcinfo, kSupportedAggregates, [](StringInfo buffer, const State& state) {
        hpcacct::pg::send_sum(buffer, state.sum);
        pq_sendint32(buffer, state.at);
        pq_sendint32(buffer, state.convention);
    });
}

// Validates what it reads as if it came from an attacker: exact size, then theoretical::validate.
PG_FUNCTION_INFO_V1(hpcacct_theoretical_deserialfn);
Datum hpcacct_theoretical_deserialfn(PG_FUNCTION_ARGS) {
    return hpcacct::pg::deserialize_state<State>(
        fcinfo, kSupportedAggregates, kSerializedSize,
        [](StringInfo buffer, State& state) {
            hpcacct::pg::receive_sum(buffer, state.sum);
            state.at = static_cast<int32>(pq_getmsgint(buffer, 4));
            state.convention = static_cast<int32>(pq_getmsgint(buffer, 4));
        },
        theoretical::validate);
}

// regulation_status(consumption, tc, tmc): 'ok', 'warning' or 'retraction' (rules §2).
PG_FUNCTION_INFO_V1(hpcacct_regulation_status);
Datum hpcacct_regulation_status(PG_FUNCTION_ARGS) {
    const double consumption = PG_GETARG_FLOAT8(0);
    const double tc = PG_GETARG_FLOAT8(1);
    const double tmc = PG_GETARG_FLOAT8(2);
    const char* status =
        guarded([&] { return theoretical::to_string(theoretical::regulation_status(consumption, tc, tmc)); });
    PG_RETURN_TEXT_P(cstring_to_text(status));
}

}  // extern "C"
