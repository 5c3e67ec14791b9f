#include "core/calendar.hpp"

#include "core/error.hpp"

#include <cstdio>
#include <string>

namespace hpcacct::calendar {
namespace {

std::string iso(const Civil& d) {
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
