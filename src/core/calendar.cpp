#include "core/calendar.hpp"

#include "core/error.hpp"

#include <cstdio>
#include <exception>
#include <string>

namespace hpcacct::calendar {
namespace {

using boost::gregorian::gregorian_calendar;

constexpr int kMinYear = 1400;
constexpr int kMaxYear = 9999;

using Ymd = Civil;

Ymd split(date day) {
    if (day.is_special())
        throw Error(ErrorKind::invalid_datetime, "date is not a finite date");
    try {
        const auto ymd = day.year_month_day();
        const int year = ymd.year;
        const int month = ymd.month;
        return {year, month, ymd.day, gregorian_calendar::end_of_month_day(ymd.year, ymd.month)};
    } catch (const std::exception&) {
        throw Error(ErrorKind::invalid_datetime, "date is out of range",
                    "Supported dates are 1400-01-01 to 9999-12-31.");
    }
}

std::string iso(const Ymd& d) {
    char text[16];
    std::snprintf(text, sizeof text, "%04d-%02d-%02d", d.year, d.month, d.day);
    return text;
}

}  // namespace

MonthConvention parse_month_convention(std::string_view text) {
    if (text == "half_month")
        return MonthConvention::half_month;
    if (text == "day")
        return MonthConvention::day;
    constexpr std::size_t kShown = 64;
    std::string shown(text.substr(0, kShown));
    if (text.size() > kShown)
        shown += "...";
    throw Error(ErrorKind::invalid_argument, "invalid month convention \"" + shown + "\"",
                "Accepted conventions are \"half_month\" and \"day\".");
}

const char* to_string(MonthConvention convention) {
    return convention == MonthConvention::day ? "day" : "half_month";
}

void check_date(date day) {
    split(day);
}

Civil civil(date day) {
    return split(day);
}

date make_date(int year, int month, int day) {
    using Short = unsigned short;  // Boost's field type; checked first so nothing wraps
    if (year < kMinYear || year > kMaxYear || month < 1 || month > 12 || day < 1 ||
        day > gregorian_calendar::end_of_month_day(Short(year), Short(month))) {
        char text[64];
        std::snprintf(text, sizeof text, "invalid date %d-%02d-%02d", year, month, day);
        throw Error(ErrorKind::invalid_datetime, text, "Supported dates are 1400-01-01 to 9999-12-31.");
    }
    try {
        return date(Short(year), Short(month), Short(day));
    } catch (const std::exception& e) {
        throw Error(ErrorKind::invalid_datetime, std::string("invalid date: ") + e.what());
    }
}

double month_position(date day, MonthConvention convention) {
    const Boundary b = start_of(split(day), convention);
    return static_cast<double>(b.months) + b.fraction;
}

double months_spanned(date from, date until_inclusive, MonthConvention convention) {
    const Ymd f = split(from);  // in this order: the first bad date is the one reported
    const Ymd u = split(until_inclusive);
    return months_spanned(f, u, convention);
}

double window_months(date from, date until_inclusive, MonthConvention convention) {
    const Ymd f = split(from);  // in this order: the first bad date is the one reported
    const Ymd u = split(until_inclusive);
    return window_months(f, u, convention);
}

namespace detail {

void inverted_window(const Civil& from, const Civil& until) {
    throw Error(ErrorKind::invalid_argument,
                "inverted window: valid until " + iso(until) + " is before valid from " + iso(from));
}

void empty_window(const Civil& from, const Civil& until, MonthConvention convention) {
    throw Error(ErrorKind::invalid_argument,
                "empty window: " + iso(from) + " to " + iso(until) + " spans no time under the " +
                    to_string(convention) + " convention",
                "Both ends round to the same half-month boundary; "
                "use the 'day' convention for such a short window.");
}

}  // namespace detail

}  // namespace hpcacct::calendar
