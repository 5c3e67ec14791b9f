// Theoretical consumption and monthly regulation, GENCI/IDRIS (rules §2).
//
// Each allocation event (amount, valid from..until inclusive) contributes to
//   TMC(d) = sum of amount / window_months            for from <= d <= until
//   TC(d)  = sum of amount * months(from, end of min(d, until)) / window_months   for from <= d
// so TC(d) is the integral of TMC up to the end of day d. Every row is validated, even one
// that contributes 0 at d.
#pragma once
#include "core/core_only.hpp"

#include "core/calendar.hpp"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace hpcacct::theoretical {

using calendar::Civil;
using calendar::MonthConvention;

namespace detail {
// Throw Error(out_of_range): "<what> must be a finite number", "theoretical consumption is
// out of range", "sum is out of range".
[[noreturn]] void not_finite(const char* what);
[[noreturn]] void result_out_of_range();
[[noreturn]] void sum_out_of_range();
}  // namespace detail

// An event's contribution at `at`, on days already checked and split (calendar::civil_of_day).
// Throws Error(out_of_range) on a non-finite amount, Error(invalid_argument) on an inverted
// or empty window.
inline double tmc_contribution(const Civil& from, const Civil& until, double amount, const Civil& at,
                               MonthConvention convention) {
    if (!std::isfinite(amount)) detail::not_finite("allocation amount");
    const double window = calendar::window_months(from, until, convention);
    if (at < from || until < at)
        return 0;
    const double result = amount / window;
    if (!std::isfinite(result)) detail::result_out_of_range();
    return result;
}

inline double tc_contribution(const Civil& from, const Civil& until, double amount, const Civil& at,
                              MonthConvention convention) {
    if (!std::isfinite(amount)) detail::not_finite("allocation amount");
    const double window = calendar::window_months(from, until, convention);
    if (at < from)
        return 0;
    if (!(at < until))
        return amount;  // the whole window has elapsed: exactly the amount
    // The elapsed share first: it is at most 1, so |TC| never passes |amount|, even where
    // amount * elapsed would round upward (a subnormal amount).
    const double elapsed_share = calendar::months_spanned(from, at, convention) / window;
    const double result = amount * elapsed_share;
    if (!std::isfinite(result)) detail::result_out_of_range();
    return result;
}

// The same on days counted from 2000-01-01, each within calendar::kFirstDay..kLastDay (the
// caller checks; `at`, the same on every row, comes split too): the aggregates' path. A row whose `until` is 31 days or more after `from`
// cannot be inverted or empty under either convention (its 32 days or more span more than a
// month, and rounding to half months moves each end by at most a quarter), so when `at` is
// outside its window the result needs no calendar at all: exactly 0 or the amount, as the
// Civil forms return (a unit test compares the two forms around the threshold).
inline double tmc_contribution(std::int32_t from, std::int32_t until, double amount, const calendar::Day& at,
                               MonthConvention convention) {
    if (until - from >= 31 && (at.days < from || until < at.days)) {
        if (!std::isfinite(amount)) detail::not_finite("allocation amount");
        return 0;
    }
    return tmc_contribution(calendar::civil_of_day(from), calendar::civil_of_day(until), amount, at.civil,
                            convention);
}

inline double tc_contribution(std::int32_t from, std::int32_t until, double amount, const calendar::Day& at,
                              MonthConvention convention) {
    if (until - from >= 31 && (at.days < from || !(at.days < until))) {
        if (!std::isfinite(amount)) detail::not_finite("allocation amount");
        return at.days < from ? 0 : amount;
    }
    return tc_contribution(calendar::civil_of_day(from), calendar::civil_of_day(until), amount, at.civil,
                           convention);
}

// Compensated (Neumaier) running sum; flat so that it can be an aggregate state.
// add and merge throw Error(out_of_range) on non-finite input or when the sum overflows
// (add leaves the state unchanged then), value() on overflow.
struct Sum {
    double sum = 0;
    double compensation = 0;

    void add(double x);            // inline, below: the aggregates call it for every row
    void merge(const Sum& other);  // an aggregate combine function
    double value() const;
};
static_assert(std::is_trivially_copyable_v<Sum> && std::is_standard_layout_v<Sum>);

inline void Sum::add(double x) {
    if (!std::isfinite(x)) detail::not_finite("summand");
    const double t = sum + x;
    double c = compensation;
    if (std::fabs(sum) >= std::fabs(x))
        c += (sum - t) + x;
    else
        c += (x - t) + sum;
    // An overflow is refused here, leaving the state as it was: a non-finite state would be
    // refused anyway by value() (serial plan) or by a deserialize function (parallel plan),
    // with different errors.
    if (!std::isfinite(t) || !std::isfinite(c)) detail::sum_out_of_range();
    sum = t;
    compensation = c;
}

// The state of the aggregates tmc and tc: the sum, and the date and convention its rows are
// evaluated at. TMC and TC are of one date: rows naming several would add figures of
// different dates, so they are refused, as the other aggregates refuse several "at". All
// zero is the state before the first row.
struct State {
    Sum sum;
    std::int32_t at;          // days from 2000-01-01
    std::int32_t convention;  // 1 + MonthConvention; 0 before the first row
};
static_assert(std::is_trivially_copyable_v<State> && std::is_standard_layout_v<State>);

// Records a row's date and convention; Error(invalid_argument) if the state has others.
void accept_row(State& state, std::int32_t at, MonthConvention convention);
// An aggregate combine function; Error(invalid_argument) if the states' dates or conventions
// differ, leaving `state` as it was.
void merge(State& state, const State& other);
// Error(internal) unless accept_row and Sum::add could have built the state (a deserialized one).
void validate(const State& state);

enum class RegulationStatus { ok, warning, retraction };

// With delta = consumption - tc:  delta > -tmc: ok;  -2 tmc < delta <= -tmc: warning;
// delta <= -2 tmc: retraction. With tmc <= 0 no hours are running: ok.
// Throws Error(out_of_range) on a non-finite input.
RegulationStatus regulation_status(double consumption, double tc, double tmc);
const char* to_string(RegulationStatus status);  // "ok", "warning", "retraction"

}  // namespace hpcacct::theoretical
