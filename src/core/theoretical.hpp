// Theoretical consumption and monthly regulation, GENCI/IDRIS (SPEC §2).
//
// Each allocation event (amount, valid from..until inclusive) contributes to
//   TMC(d) = sum of amount / window_months            for from <= d <= until
//   TC(d)  = sum of amount * months(from, end of min(d, until)) / window_months   for from <= d
// so TC(d) is the integral of TMC up to the end of day d. Every row is validated, even one
// that contributes 0 at d.
#pragma once
#include "core/core_only.hpp"

#include "core/calendar.hpp"

#include <type_traits>

namespace hpcacct::theoretical {

using calendar::Civil;
using calendar::date;
using calendar::MonthConvention;

// Throws Error(out_of_range) on a non-finite amount, Error(invalid_argument) on an inverted
// or empty window, Error(invalid_datetime) on a special or out-of-range date.
double tmc_contribution(date from, date until, double amount, date at, MonthConvention convention);
double tc_contribution(date from, date until, double amount, date at, MonthConvention convention);

// The same on days already checked and split (calendar::civil_of_day): the aggregates' path,
// with the same results and the same errors for the amount and the window.
double tmc_contribution(const Civil& from, const Civil& until, double amount, const Civil& at,
                        MonthConvention convention);
double tc_contribution(const Civil& from, const Civil& until, double amount, const Civil& at,
                       MonthConvention convention);

// Compensated (Neumaier) running sum; flat so that it can be an aggregate state.
// add and merge throw Error(out_of_range) on non-finite input or when the sum overflows
// (add leaves the state unchanged then), value() on overflow.
struct Sum {
    double sum = 0;
    double compensation = 0;

    void add(double x);
    void merge(const Sum& other);  // an aggregate combine function
    double value() const;
};
static_assert(std::is_trivially_copyable_v<Sum> && std::is_standard_layout_v<Sum>);

enum class RegulationStatus { ok, warning, retraction };

// With delta = consumption - tc:  delta > -tmc: ok;  -2 tmc < delta <= -tmc: warning;
// delta <= -2 tmc: retraction. With tmc <= 0 no hours are running: ok.
// Throws Error(out_of_range) on a non-finite input.
RegulationStatus regulation_status(double consumption, double tc, double tmc);
const char* to_string(RegulationStatus status);  // "ok", "warning", "retraction"

}  // namespace hpcacct::theoretical
