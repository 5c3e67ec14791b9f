#include "core/calendar.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include "date_forms.hpp"
#include "error_kind.hpp"

#include <string>

using hpcacct::testing::kind_of;

namespace {

using hpcacct::Error;
using hpcacct::ErrorKind;
using namespace hpcacct::calendar;
using namespace hpcacct::testing::dates;

constexpr auto kHalf = MonthConvention::half_month;
constexpr auto kDay = MonthConvention::day;

date ymd(int y, int m, int d) {
    return make_date(y, m, d);
}

// Position within its year: the fraction part plus the month index.
double in_year(date day, MonthConvention c) {
    return month_position(day, c) - 12.0 * day.year();
}

template <typename F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return std::string(e.what()) + " | " + e.detail();
    }
    ADD_FAILURE() << "no hpcacct::Error thrown";
    return {};
}

TEST(Calendar, ParsesConventions) {
    EXPECT_EQ(parse_month_convention("half_month"), kHalf);
    EXPECT_EQ(parse_month_convention("day"), kDay);
    EXPECT_STREQ(to_string(kHalf), "half_month");
    EXPECT_STREQ(to_string(kDay), "day");
}

TEST(Calendar, RejectsUnknownConventions) {
    for (const char* bad : {"", "Day", "half-month", "half_month ", "month"})
        EXPECT_EQ(kind_of([&] { parse_month_convention(bad); }), ErrorKind::invalid_argument) << bad;
    const std::string message = message_of([] { parse_month_convention("weekly"); });
    EXPECT_NE(message.find("\"weekly\""), std::string::npos) << message;
    EXPECT_NE(message.find("half_month"), std::string::npos) << message;
    EXPECT_NE(message.find("\"day\""), std::string::npos) << message;
}

TEST(Calendar, PositionCountsMonthsFromAFixedEpoch) {
    EXPECT_EQ(month_position(ymd(2024, 1, 1), kHalf), 12.0 * 2024);
    EXPECT_EQ(month_position(ymd(2024, 7, 1), kDay), 12.0 * 2024 + 6);
    EXPECT_EQ(month_position(ymd(2025, 1, 1), kHalf) - month_position(ymd(2024, 1, 1), kHalf), 12.0);
}

TEST(Calendar, HalfMonthRoundsToNearestHalfTiesUpward) {
    EXPECT_EQ(in_year(ymd(2023, 3, 15), kHalf), 2.5);   // 14/31 = 0.45
    EXPECT_EQ(in_year(ymd(2023, 11, 16), kHalf), 10.5);  // 15/30 = 0.5, a tie
    EXPECT_EQ(in_year(ymd(2023, 1, 16), kHalf), 0.5);   // 15/31 = 0.48
    EXPECT_EQ(in_year(ymd(2023, 2, 16), kHalf), 1.5);   // 15/28 = 0.536
    EXPECT_EQ(in_year(ymd(2023, 12, 28), kHalf), 12.0);  // 27/31 = 0.87: next month's start
    EXPECT_EQ(in_year(ymd(2023, 4, 8), kHalf), 3.0);    // 7/30 = 0.233
    EXPECT_EQ(in_year(ymd(2023, 4, 9), kHalf), 3.5);    // 8/30 = 0.267
    EXPECT_EQ(in_year(ymd(2023, 2, 8), kHalf), 1.5);    // 7/28 = 0.25, a tie
    EXPECT_EQ(in_year(ymd(2023, 2, 22), kHalf), 2.0);   // 21/28 = 0.75, a tie
}

TEST(Calendar, DayConventionKeepsExactFractions) {
    EXPECT_EQ(month_position(ymd(2023, 3, 15), kDay), 12.0 * 2023 + 2 + 14.0 / 31);
    EXPECT_EQ(month_position(ymd(2023, 11, 16), kDay), 12.0 * 2023 + 10 + 15.0 / 30);
    EXPECT_EQ(month_position(ymd(2024, 2, 29), kDay), 12.0 * 2024 + 1 + 28.0 / 29);
    // Windows are computed from whole months and fractions, without the epoch's magnitude.
    EXPECT_EQ(window_months(ymd(2023, 1, 1), ymd(2023, 3, 14), kDay), 2 + 14.0 / 31);
    EXPECT_EQ(window_months(ymd(2023, 3, 15), ymd(2023, 12, 31), kDay), 10 - 14.0 / 31);
    EXPECT_EQ(window_months(ymd(2023, 12, 28), ymd(2023, 12, 31), kDay), 1 - 27.0 / 31);
    EXPECT_EQ(window_months(ymd(2024, 2, 10), ymd(2024, 2, 19), kDay), 19.0 / 29 - 9.0 / 29);
    EXPECT_EQ(window_months(ymd(2023, 2, 1), ymd(2023, 2, 28), kDay), 1.0);
}

TEST(Calendar, WindowIncludesItsLastDay) {
    EXPECT_EQ(window_months(ymd(2023, 1, 1), ymd(2023, 12, 31), kHalf), 12.0);
    EXPECT_EQ(window_months(ymd(2023, 3, 15), ymd(2023, 12, 31), kHalf), 9.5);
    EXPECT_EQ(window_months(ymd(2023, 7, 1), ymd(2023, 12, 31), kHalf), 6.0);
    EXPECT_EQ(window_months(ymd(2023, 11, 16), ymd(2023, 12, 31), kHalf), 1.5);
    EXPECT_EQ(window_months(ymd(2023, 6, 1), ymd(2023, 6, 30), kDay), 1.0);
    EXPECT_EQ(window_months(ymd(2023, 1, 1), ymd(2023, 1, 1), kDay), 1.0 / 31);
}

TEST(Calendar, RefusesTheWindowHalfMonthMakesEmpty) {
    const auto empty = [] { window_months(ymd(2023, 12, 28), ymd(2023, 12, 31), kHalf); };
    EXPECT_EQ(kind_of(empty), ErrorKind::invalid_argument);
    const std::string message = message_of(empty);
    EXPECT_NE(message.find("empty window"), std::string::npos) << message;
    EXPECT_NE(message.find("2023-12-28"), std::string::npos) << message;
    EXPECT_NE(message.find("'day'"), std::string::npos) << message;
    EXPECT_EQ(months_spanned(ymd(2023, 12, 28), ymd(2023, 12, 31), kHalf), 0.0);
}

TEST(Calendar, RefusesAnInvertedWindow) {
    const auto inverted = [] { window_months(ymd(2023, 3, 2), ymd(2023, 3, 1), kDay); };
    EXPECT_EQ(kind_of(inverted), ErrorKind::invalid_argument);
    EXPECT_NE(message_of(inverted).find("inverted"), std::string::npos);
    EXPECT_EQ(kind_of([] { months_spanned(ymd(2024, 1, 1), ymd(2023, 12, 31), kHalf); }),
              ErrorKind::invalid_argument);
}

TEST(Calendar, SpecialAndOutOfRangeDatesAreInvalidDatetime) {
    const date nad(boost::date_time::not_a_date_time);
    const date inf(boost::date_time::pos_infin);
    EXPECT_EQ(kind_of([&] { month_position(nad, kHalf); }), ErrorKind::invalid_datetime);
    EXPECT_EQ(kind_of([&] { window_months(ymd(2023, 1, 1), inf, kDay); }), ErrorKind::invalid_datetime);
    EXPECT_EQ(kind_of([&] { check_date(nad); }), ErrorKind::invalid_datetime);
    // Arithmetic past Boost's range yields a date whose fields cannot be read.
    const date past_end = ymd(9999, 12, 31) + boost::gregorian::days(1);
    const date before_start = ymd(1400, 1, 1) - boost::gregorian::days(1);
    EXPECT_EQ(kind_of([&] { month_position(past_end, kDay); }), ErrorKind::invalid_datetime);
    EXPECT_EQ(kind_of([&] { window_months(before_start, ymd(2000, 1, 1), kDay); }),
              ErrorKind::invalid_datetime);
    // The last representable day still has an end.
    EXPECT_EQ(window_months(ymd(9999, 12, 1), ymd(9999, 12, 31), kHalf), 1.0);
}

}  // namespace

namespace {

using hpcacct::calendar::Civil;

// The aggregates split PostgreSQL dates with civil_of_day; it must agree with Boost on
// every day of the range, leap days and century years included.
TEST(Calendar, CivilOfDayAgreesWithBoostOnEveryDay) {
    const date epoch = ymd(2000, 1, 1);
    EXPECT_EQ(date(epoch + boost::gregorian::days(kFirstDay)), ymd(1400, 1, 1));
    EXPECT_EQ(date(epoch + boost::gregorian::days(kLastDay)), ymd(9999, 12, 31));
    int mismatches = 0;
    for (std::int32_t n = kFirstDay; n <= kLastDay && mismatches < 10; ++n) {
        const date day = epoch + boost::gregorian::days(n);
        const Civil fast = civil_of_day(n);
        const Civil slow = civil(day);
        if (fast.year != slow.year || fast.month != slow.month || fast.day != slow.day ||
            fast.days_in_month != slow.days_in_month) {
            ++mismatches;
            ADD_FAILURE() << "day " << n << ": " << fast.year << "-" << fast.month << "-" << fast.day << " ("
                          << fast.days_in_month << ") instead of " << slow.year << "-" << slow.month << "-" << slow.day;
        }
    }
    EXPECT_EQ(mismatches, 0);
}

TEST(Calendar, CivilFormsEqualTheDateForms) {
    const date from = ymd(2023, 3, 15), until = ymd(2024, 2, 29);
    const Civil f = civil(from), u = civil(until);
    for (MonthConvention c : {kHalf, kDay}) {
        EXPECT_EQ(window_months(f, u, c), window_months(from, until, c));
        EXPECT_EQ(months_spanned(f, civil(ymd(2023, 11, 16)), c), months_spanned(from, ymd(2023, 11, 16), c));
    }
    EXPECT_EQ(kind_of([&] { window_months(u, f, kDay); }), ErrorKind::invalid_argument);
    EXPECT_EQ(message_of([&] { window_months(u, f, kDay); }), message_of([&] { window_months(until, from, kDay); }));
    EXPECT_LT(f, u);
    EXPECT_FALSE(u < f);
    EXPECT_FALSE(f < f);
}

}  // namespace
