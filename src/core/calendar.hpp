// Months of the allocation year, as GENCI/IDRIS measure validity windows (SPEC §2).
//
// A boundary is 00:00 of a day; its position in months is 12*year + month-1 + fraction,
// fraction = (day_of_month-1) / days_in_month, kept exact (`day`) or rounded to the nearest
// half month, ties upward (`half_month`, the document's table). Validity ends are inclusive.
#pragma once
#include "core/core_only.hpp"

#include <boost/date_time/gregorian/gregorian_types.hpp>

#include <string_view>

namespace hpcacct::calendar {

using boost::gregorian::date;

enum class MonthConvention { half_month, day };

// Accepts exactly "half_month" and "day"; throws Error(invalid_argument) otherwise.
MonthConvention parse_month_convention(std::string_view text);
const char* to_string(MonthConvention convention);

// Throws Error(invalid_datetime) unless `day` is a real date in Boost's range (1400..9999).
void check_date(date day);

// date(year, month, day) with every failure as Error(invalid_datetime).
date make_date(int year, int month, int day);

// Position of the boundary at 00:00 of `day`.
double month_position(date day, MonthConvention convention);

// Months from 00:00 of `from` to the end of `until_inclusive`; may be 0.
// Throws Error(invalid_argument) if until_inclusive < from.
double months_spanned(date from, date until_inclusive, MonthConvention convention);

// months_spanned, refusing a window the convention makes empty (Error(invalid_argument)).
double window_months(date from, date until_inclusive, MonthConvention convention);

}  // namespace hpcacct::calendar
