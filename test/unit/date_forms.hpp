// Test-only: the core's month arithmetic and theoretical contributions on Boost dates, the
// form in which the unit tests and the fuzzers write their cases. The product splits day
// counts (calendar::civil_of_day) and calls the Civil forms; these helpers split a Boost date,
// check it as the product's glue does (1400-01-01 .. 9999-12-31, Error(invalid_datetime)
// otherwise), then call the same Civil forms.
#pragma once

#include "core/calendar.hpp"
#include "core/error.hpp"
#include "core/theoretical.hpp"

#include <boost/date_time/gregorian/gregorian_types.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace hpcacct::testing::dates {

using boost::gregorian::date;
using calendar::Civil;
using calendar::MonthConvention;

// The civil fields of `day`; Error(invalid_datetime) for a special or out-of-range date.
inline Civil civil(date day) {
    if (day.is_special()) throw Error(ErrorKind::invalid_datetime, "date is not a finite date");
    try {
        const auto ymd = day.year_month_day();
        return {ymd.year, ymd.month, ymd.day,
                boost::gregorian::gregorian_calendar::end_of_month_day(ymd.year, ymd.month)};
    } catch (const std::exception&) {
        throw Error(ErrorKind::invalid_datetime, "date is out of range",
                    "Supported dates are 1400-01-01 to 9999-12-31.");
    }
}

inline void check_date(date day) { civil(day); }

// date(year, month, day), every failure (outside 1400..9999 too) as Error(invalid_datetime).
inline date make_date(int year, int month, int day) {
    using Short = unsigned short;
    if (year < 1400 || year > 9999 || month < 1 || month > 12 || day < 1 ||
        day > boost::gregorian::gregorian_calendar::end_of_month_day(Short(year), Short(month))) {
        char text[64];
        std::snprintf(text, sizeof text, "invalid date %d-%02d-%02d", year, month, day);
        throw Error(ErrorKind::invalid_datetime, text, "Supported dates are 1400-01-01 to 9999-12-31.");
    }
    return date(Short(year), Short(month), Short(day));
}

// Position in months of the boundary at 00:00 of `day`.
inline double month_position(date day, MonthConvention convention) {
    const calendar::Boundary b = calendar::start_of(civil(day), convention);
    return static_cast<double>(b.months) + b.fraction;
}

// The first bad date is the one reported: `from`, then `until_inclusive`.
inline double months_spanned(date from, date until_inclusive, MonthConvention convention) {
    const Civil f = civil(from);
    return calendar::months_spanned(f, civil(until_inclusive), convention);
}

inline double window_months(date from, date until_inclusive, MonthConvention convention) {
    const Civil f = civil(from);
    return calendar::window_months(f, civil(until_inclusive), convention);
}

// An allocation event's contribution, checked in the order the aggregates check a row:
// amount, window, then `at`.
struct Row {
    Civil from, until, at;
};
inline Row checked_row(date from, date until, double amount, date at, MonthConvention convention) {
    if (!std::isfinite(amount)) theoretical::detail::not_finite("allocation amount");
    const Civil f = civil(from);
    const Civil u = civil(until);
    calendar::window_months(f, u, convention);
    return {f, u, civil(at)};
}

inline double tmc_contribution(date from, date until, double amount, date at, MonthConvention convention) {
    const Row row = checked_row(from, until, amount, at, convention);
    return theoretical::tmc_contribution(row.from, row.until, amount, row.at, convention);
}

inline double tc_contribution(date from, date until, double amount, date at, MonthConvention convention) {
    const Row row = checked_row(from, until, amount, at, convention);
    return theoretical::tc_contribution(row.from, row.until, amount, row.at, convention);
}

}  // namespace hpcacct::testing::dates
