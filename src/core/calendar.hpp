// Months of the allocation year, as GENCI/IDRIS measure validity windows (rules §2).
//
// A boundary is 00:00 of a day; its position in months is 12*year + month-1 + fraction,
// fraction = (day_of_month-1) / days_in_month, kept exact (`day`) or rounded to the nearest
// half month, ties upward (`half_month`, the document's table). Validity ends are inclusive.
#pragma once
#include "core/core_only.hpp"

#include <cstdint>
#include <string_view>

namespace hpcacct::calendar {

// A day of Boost's range as its civil fields and the length of its month: all that the
// month arithmetic below needs. Built by civil_of_day().
struct Civil {
    int year;
    int month;           // 1..12
    int day;             // 1..days_in_month
    int days_in_month;   // 28..31
};

// Days in a month (1..12) of a year of the proleptic Gregorian calendar.
constexpr int days_in_month(int year, int month) {
    constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    return month == 2 && leap ? 29 : kDays[month - 1];
}

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
// only, for kFirstDay <= days <= kLastDay: the caller checks, this is the per-row path of the
// aggregates. Agrees with Boost on every day of the range (a unit test checks them all).
// C. Neri and L. Schneider's algorithm ("Euclidean affine functions and their application to
// calendar algorithms", Softw. Pract. Exper. 2023): every division is by a constant, most of
// them by a power of two; about twice as fast as H. Hinnant's civil_from_days.
constexpr Civil civil_of_day(std::int32_t days) {
    // Days are shifted so that n counts from 0000-03-01 minus 82 × 400 years: positive well
    // beyond the range, and a leap day ends its (March-based) computational year.
    constexpr std::uint32_t kShift = 82;
    constexpr std::uint32_t kK = 730425 + 146097 * kShift;  // 730425: 0000-03-01 to 2000-01-01
    constexpr std::int32_t kL = 400 * kShift;
    const std::uint32_t n = static_cast<std::uint32_t>(days) + kK;
    const std::uint32_t n1 = 4 * n + 3;
    const std::uint32_t century = n1 / 146097;
    const std::uint32_t n2 = 4 * (n1 % 146097 / 4) + 3;           // day of the century, as 4x+3
    const std::uint64_t p2 = std::uint64_t{2939745} * n2;
    const std::uint32_t year_of_century = static_cast<std::uint32_t>(p2 >> 32);
    const std::uint32_t day_of_year = static_cast<std::uint32_t>(p2) / 2939745 / 4;  // 0 = 1 March
    const std::uint32_t n3 = 2141 * day_of_year + 197913;
    const std::uint32_t march_month = n3 / 65536;                 // 3..14
    const bool january_or_february = day_of_year >= 306;
    const int year = static_cast<int>(100 * century + year_of_century) - kL + (january_or_february ? 1 : 0);
    const int month = static_cast<int>(january_or_february ? march_month - 12 : march_month);
    const int day = static_cast<int>(n3 % 65536 / 2141) + 1;
    // Leap: divisible by 4, and by 16 when divisible by 25 (i.e. by 400 when by 100).
    const bool leap = (year & 3) == 0 && (year % 25 != 0 || (year & 15) == 0);
    constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return {year, month, day, month == 2 && leap ? 29 : kDays[month - 1]};
}

// A day both as a count from 2000-01-01 and split: for a day every row compares with.
struct Day {
    std::int32_t days;
    Civil civil;
};

constexpr Day day_of(std::int32_t days) {
    return {days, civil_of_day(days)};
}

enum class MonthConvention { half_month, day };

// Accepts exactly "half_month" and "day"; throws Error(invalid_argument) otherwise.
MonthConvention parse_month_convention(std::string_view text);
const char* to_string(MonthConvention convention);

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

// Months from 00:00 of `from` to the end of `until_inclusive`; may be 0.
// Throws Error(invalid_argument) if until_inclusive < from.
inline double months_spanned(const Civil& from, const Civil& until_inclusive, MonthConvention convention) {
    if (until_inclusive < from) detail::inverted_window(from, until_inclusive);
    return months_between(start_of(from, convention), end_of(until_inclusive, convention));
}

// months_spanned, refusing a window the convention makes empty (Error(invalid_argument)).
inline double window_months(const Civil& from, const Civil& until_inclusive, MonthConvention convention) {
    const double months = months_spanned(from, until_inclusive, convention);
    if (!(months > 0)) detail::empty_window(from, until_inclusive, convention);
    return months;
}

}  // namespace hpcacct::calendar
