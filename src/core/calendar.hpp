// Months of the allocation year, as GENCI/IDRIS measure validity windows (SPEC §2).
//
// A boundary is 00:00 of a day; its position in months is 12*year + month-1 + fraction,
// fraction = (day_of_month-1) / days_in_month, kept exact (`day`) or rounded to the nearest
// half month, ties upward (`half_month`, the document's table). Validity ends are inclusive.
#pragma once
#include "core/core_only.hpp"

#include <boost/date_time/gregorian/gregorian_types.hpp>

#include <cstdint>
#include <string_view>

namespace hpcacct::calendar {

using boost::gregorian::date;

// A day of Boost's range as its civil fields and the length of its month: all that the
// month arithmetic below needs. Built by civil() (from a date) or civil_of_day().
struct Civil {
    int year;
    int month;           // 1..12
    int day;             // 1..days_in_month
    int days_in_month;   // 28..31
};

constexpr bool operator<(const Civil& a, const Civil& b) {
    if (a.year != b.year) return a.year < b.year;
    if (a.month != b.month) return a.month < b.month;
    return a.day < b.day;
}

// Days counted from 2000-01-01 (day 0, as PostgreSQL's DateADT counts them): Boost's range,
// 1400-01-01 .. 9999-12-31, is kFirstDay .. kLastDay.
constexpr std::int32_t kFirstDay = -219145;
constexpr std::int32_t kLastDay = 2921939;

// The civil date of day `days` of the proleptic Gregorian calendar, by integer arithmetic
// only (H. Hinnant's civil_from_days), for kFirstDay <= days <= kLastDay: the caller checks,
// this is the per-row path of the aggregates. Agrees with Boost on every day of the range.
constexpr Civil civil_of_day(std::int32_t days) {
    // Shifted to days from 0000-03-01, so that a leap day ends its (March-based) year; the
    // range makes it positive. 730425 = days from 0000-03-01 to 2000-01-01.
    const std::uint32_t z = static_cast<std::uint32_t>(days + 730425);
    const std::uint32_t era = z / 146097;                                         // 400-year eras
    const std::uint32_t doe = z - era * 146097;                                   // 0..146096
    const std::uint32_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // 0..399
    const std::uint32_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);             // 0..365, from March
    const std::uint32_t mp = (5 * doy + 2) / 153;                                  // 0..11, from March
    const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
    const int year = static_cast<int>(yoe + era * 400) + (month <= 2 ? 1 : 0);
    const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
    const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return {year, month, day, month == 2 && leap ? 29 : kDays[month - 1]};
}

// The civil fields of `day`; throws Error(invalid_datetime) like check_date.
Civil civil(date day);

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
// Throws Error(invalid_argument) if until_inclusive < from. (The Civil forms are below.)
double months_spanned(date from, date until_inclusive, MonthConvention convention);

// months_spanned, refusing a window the convention makes empty (Error(invalid_argument)).
double window_months(date from, date until_inclusive, MonthConvention convention);

// ---- The month arithmetic, inline: the aggregates run it for every row ----------------

// A boundary as whole months + fraction: differences avoid the epoch's rounding.
struct Boundary {
    long months;
    double fraction;
};

namespace detail {

// Half months: floor(2 * elapsed/n + 1/2) = (4 * elapsed + n) / (2 * n) in integers, so that
// ties are exact, for the n = 28..31 days of a month and 0 <= elapsed <= n; tabulated, so that
// the per-row path does no integer division by a variable.
struct HalfMonths {
    signed char halves[4][32];
};
constexpr HalfMonths make_half_months() {
    HalfMonths table{};
    for (int n = 28; n <= 31; ++n)
        for (int elapsed = 0; elapsed <= n; ++elapsed)
            table.halves[n - 28][elapsed] = static_cast<signed char>((4 * elapsed + n) / (2 * n));
    return table;
}
inline constexpr HalfMonths kHalfMonths = make_half_months();

// Throw Error(invalid_argument), as window_months and months_spanned document.
[[noreturn]] void inverted_window(const Civil& from, const Civil& until);
[[noreturn]] void empty_window(const Civil& from, const Civil& until, MonthConvention convention);

}  // namespace detail

// The boundary `elapsed_days` (0..days_in_month) into the month of `d`.
inline Boundary boundary(const Civil& d, int elapsed_days, MonthConvention convention) {
    const long months = 12L * d.year + (d.month - 1);
    const int n = d.days_in_month;
    if (convention == MonthConvention::day)
        return {months, static_cast<double>(elapsed_days) / n};
    return {months, detail::kHalfMonths.halves[n - 28][elapsed_days] / 2.0};
}

// 00:00 of `d`.
inline Boundary start_of(const Civil& d, MonthConvention convention) {
    return boundary(d, d.day - 1, convention);
}

// 00:00 of the next day, computed without date arithmetic (no overflow past 9999-12-31).
inline Boundary end_of(const Civil& d, MonthConvention convention) {
    return boundary(d, d.day, convention);
}

inline double months_between(const Boundary& a, const Boundary& b) {
    return static_cast<double>(b.months - a.months) + (b.fraction - a.fraction);
}

inline double months_spanned(const Civil& from, const Civil& until_inclusive, MonthConvention convention) {
    if (until_inclusive < from) detail::inverted_window(from, until_inclusive);
    return months_between(start_of(from, convention), end_of(until_inclusive, convention));
}

inline double window_months(const Civil& from, const Civil& until_inclusive, MonthConvention convention) {
    const double months = months_spanned(from, until_inclusive, convention);
    if (!(months > 0)) detail::empty_window(from, until_inclusive, convention);
    return months;
}

}  // namespace hpcacct::calendar
