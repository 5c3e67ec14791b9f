// Sliding-window quota (rules §3, RWTH).
#include "core/window_quota.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include "error_kind.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace wq = hpcacct::window_quota;
using hpcacct::Error;
using hpcacct::ErrorKind;
using Status = wq::Quota::Status;

using hpcacct::testing::kind_of;

namespace {

struct Row {
    int month;
    double allowance;
    double consumed;
};

// A month as the glue passes it (pg::month_index): year × 12 + month − 1.
int month_index(int year, int month) { return year * 12 + (month - 1); }
int m2012(int month) { return month_index(2012, month); }

// One row per month of 2012 from `first`, each with `allowance`; consumptions in order.
std::vector<Row> months_2012(int first, double allowance, std::vector<double> consumed) {
    std::vector<Row> rows;
    for (std::size_t i = 0; i < consumed.size(); ++i) {
        rows.push_back({m2012(first + static_cast<int>(i)), allowance, consumed[i]});
    }
    return rows;
}

wq::State state_of(const std::vector<Row>& rows, int at) {
    wq::State s{};
    for (const Row& r : rows) wq::accumulate(s, r.month, r.allowance, r.consumed, at);
    return s;
}

wq::Quota quota(const std::vector<Row>& rows, int at) { return wq::finish(state_of(rows, at)); }

void expect_same(const wq::Quota& a, const wq::Quota& b) {
    EXPECT_EQ(a.monthly, b.monthly);
    EXPECT_EQ(a.remaining_prev, b.remaining_prev);
    EXPECT_EQ(a.consumed_current, b.consumed_current);
    EXPECT_EQ(a.consumable_pct, b.consumable_pct);
    EXPECT_EQ(a.consumable_pct_defined, b.consumable_pct_defined);
    EXPECT_EQ(a.consumable, b.consumable);
    EXPECT_EQ(a.state, b.state);
}

template <typename F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

// ---- rules §3 figures ----

TEST(WindowQuota, SpecFebruary70000LeavesMarch80000) {
    const auto rows = months_2012(1, 50000, {0, 70000, 0, 0});
    const wq::Quota q = quota(rows, m2012(3));
    EXPECT_EQ(q.consumable, 80000);
    EXPECT_EQ(q.monthly, 50000);
    EXPECT_EQ(q.remaining_prev, -20000);
    EXPECT_EQ(q.consumed_current, 0);
    EXPECT_TRUE(q.consumable_pct_defined);
    EXPECT_EQ(q.consumable_pct, 60);
    EXPECT_EQ(q.state, Status::normal);
}

TEST(WindowQuota, SpecFebruary120000LeavesMarch30000) {
    const wq::Quota q = quota(months_2012(1, 50000, {0, 120000, 0, 0}), m2012(3));
    EXPECT_EQ(q.consumable, 30000);
    EXPECT_EQ(q.remaining_prev, -70000);
    EXPECT_EQ(q.consumable_pct, -40);
    EXPECT_EQ(q.state, Status::normal);

    // Using those 30 000 in March exhausts the quota: exactly -100 % is still shown as is.
    const wq::Quota used = quota(months_2012(1, 50000, {0, 120000, 30000, 0}), m2012(3));
    EXPECT_EQ(used.consumable, 0);
    EXPECT_EQ(used.consumable_pct, -100);
    EXPECT_EQ(used.state, Status::low_priority);
}

TEST(WindowQuota, SpecRwlmUsageExample) {
    // Period 01.01.2012-30.06.2012, 1 000 a month; March used 800, April (current) 0.
    const wq::Quota q = quota(months_2012(1, 1000, {1000, 1000, 800, 0, 0, 0}), m2012(4));
    EXPECT_EQ(q.monthly, 1000);
    EXPECT_EQ(q.remaining_prev, 200);
    EXPECT_EQ(q.consumed_current, 0);
    EXPECT_TRUE(q.consumable_pct_defined);
    EXPECT_EQ(q.consumable_pct, 120);
    EXPECT_EQ(q.consumable, 2200);
    EXPECT_EQ(q.state, Status::normal);
}

// ---- period edges ----

TEST(WindowQuota, FirstMonthGetsNoTransferIn) {
    const wq::Quota q = quota(months_2012(1, 1000, {300, 0, 0, 0, 0, 0}), m2012(1));
    EXPECT_EQ(q.remaining_prev, 0);
    EXPECT_EQ(q.consumable, 1700);  // 1000 + 1000 - 300
    EXPECT_EQ(q.consumable_pct, 70);
}

TEST(WindowQuota, LastMonthBorrowsNothingPastIt) {
    const wq::Quota q = quota(months_2012(1, 1000, {0, 0, 0, 0, 500, 100}), m2012(6));
    EXPECT_EQ(q.remaining_prev, 500);
    EXPECT_EQ(q.consumable, 1400);  // 1000 + 1000 - 500 - 100
    EXPECT_EQ(q.consumable_pct, 140);
}

TEST(WindowQuota, OneMonthPeriod) {
    const wq::Quota q = quota({{m2012(5), 1000, 300}}, m2012(5));
    EXPECT_EQ(q.monthly, 1000);
    EXPECT_EQ(q.remaining_prev, 0);
    EXPECT_EQ(q.consumed_current, 300);
    EXPECT_EQ(q.consumable, 700);
    EXPECT_EQ(q.consumable_pct, 70);
    EXPECT_EQ(q.state, Status::normal);

    const wq::Quota spent = quota({{m2012(5), 1000, 1000}}, m2012(5));
    EXPECT_EQ(spent.consumable, 0);
    EXPECT_EQ(spent.state, Status::low_priority);
}

TEST(WindowQuota, TwoMonthPeriod) {
    const auto rows = months_2012(1, 1000, {1500, 0});
    const wq::Quota jan = quota(rows, m2012(1));
    EXPECT_EQ(jan.consumable, 500);  // 1000 + 1000 - 1500
    EXPECT_EQ(jan.consumable_pct, -50);
    EXPECT_EQ(jan.state, Status::normal);

    const wq::Quota feb = quota(rows, m2012(2));
    EXPECT_EQ(feb.remaining_prev, -500);
    EXPECT_EQ(feb.consumable, 500);  // 1000 + 1000 - 1500
    EXPECT_EQ(feb.consumable_pct, 50);
}

TEST(WindowQuota, AtOutsideThePeriodHasNoQuota) {
    const auto rows = months_2012(3, 1000, {0, 200, 400});  // March-May
    for (int at : {m2012(1), m2012(2), m2012(6), m2012(7), month_index(2013, 3)}) {
        const wq::Quota q = quota(rows, at);
        EXPECT_EQ(q.monthly, 0) << at;
        EXPECT_EQ(q.remaining_prev, 0) << at;
        EXPECT_EQ(q.consumed_current, 0) << at;
        EXPECT_EQ(q.consumable, 0) << at;
        EXPECT_FALSE(q.consumable_pct_defined) << at;
        EXPECT_EQ(q.state, Status::low_priority) << at;
    }
    // ... also after a period that used more than twice its allowances (README: a month
    // outside every period has no quota), which was blocked inside it.
    const auto over = months_2012(3, 1000, {0, 3000, 3001});
    EXPECT_EQ(quota(over, m2012(5)).state, Status::blocked);
    for (int at : {m2012(6), m2012(7)}) EXPECT_EQ(quota(over, at).state, Status::low_priority) << at;
}

TEST(WindowQuota, MonthWithoutARowInsideThePeriodCountsAsZero) {
    const std::vector<Row> rows = {{m2012(1), 1000, 600}, {m2012(3), 1000, 0}};
    const wq::Quota q = quota(rows, m2012(2));
    EXPECT_EQ(q.monthly, 0);
    EXPECT_EQ(q.remaining_prev, 400);
    EXPECT_EQ(q.consumable, 1400);  // 1000 + 0 + 1000 - 600
    EXPECT_FALSE(q.consumable_pct_defined);
    EXPECT_EQ(q.state, Status::normal);
}

// ---- zero allowance ----

TEST(WindowQuota, ZeroAllowanceInCurrentMonth) {
    // Neighbours lend to it: normal, percentage undefined.
    const std::vector<Row> rows = {{m2012(1), 1000, 0}, {m2012(2), 0, 0}, {m2012(3), 1000, 0}};
    const wq::Quota q = quota(rows, m2012(2));
    EXPECT_FALSE(q.consumable_pct_defined);
    EXPECT_EQ(q.consumable_pct, 0);
    EXPECT_EQ(q.monthly, 0);
    EXPECT_EQ(q.consumable, 2000);
    EXPECT_EQ(q.state, Status::normal);

    // Any use in a month without allowance exceeds 6 × 0.
    const std::vector<Row> used = {{m2012(1), 1000, 0}, {m2012(2), 0, 10}, {m2012(3), 1000, 0}};
    const wq::Quota b = quota(used, m2012(2));
    EXPECT_EQ(b.consumable, 1990);
    EXPECT_EQ(b.state, Status::blocked);
}

TEST(WindowQuota, PeriodWithoutAnyAllowance) {
    const wq::Quota q = quota(months_2012(1, 0, {0, 0, 0}), m2012(2));
    EXPECT_FALSE(q.consumable_pct_defined);
    EXPECT_EQ(q.consumable, 0);
    EXPECT_EQ(q.state, Status::low_priority);
}

// ---- over quota ----

TEST(WindowQuota, FarBeyondQuotaShowsMinus101AndLowPriority) {
    // March used 3 500 of 1 000: April has (1000 + 1000 - 3500) / 1000 = -150 % -> -101.
    const wq::Quota q = quota(months_2012(1, 1000, {0, 0, 3500, 0, 0, 0}), m2012(4));
    EXPECT_TRUE(q.consumable_pct_defined);
    EXPECT_EQ(q.consumable_pct, -101);
    EXPECT_EQ(q.consumable, -500);
    EXPECT_EQ(q.remaining_prev, -2500);
    EXPECT_EQ(q.state, Status::low_priority);
}

TEST(WindowQuota, BlockedBySixTimesTheMonthlyAllowance) {
    const std::vector<double> none(9, 0);
    auto with_march = [&](double c) {
        std::vector<double> consumed = {0, 0, c};
        consumed.insert(consumed.end(), none.begin(), none.end());
        return quota(months_2012(1, 1000, consumed), m2012(3));
    };
    EXPECT_EQ(with_march(6000).state, Status::low_priority);  // 6 x, not more
    const wq::Quota q = with_march(6001);
    EXPECT_EQ(q.state, Status::blocked);  // wins over low_priority
    EXPECT_EQ(q.consumable, -3001);
}

TEST(WindowQuota, BlockedByTwiceThePeriodAllowance) {
    // Period allowance 3 000; 6 000 used is the limit, 6 001 blocks even with quota left in March.
    EXPECT_EQ(quota(months_2012(1, 1000, {5000, 1000, 0}), m2012(3)).state, Status::normal);
    const wq::Quota q = quota(months_2012(1, 1000, {5000, 1001, 0}), m2012(3));
    EXPECT_EQ(q.consumable, 999);
    EXPECT_EQ(q.state, Status::blocked);
}

// ---- aggregation ----

TEST(WindowQuota, RowsForTheSameMonthAddUp) {
    const std::vector<Row> split = {{m2012(1), 600, 100}, {m2012(2), 1000, 0}, {m2012(1), 400, 700},
                                    {m2012(3), 1000, 0}};
    const std::vector<Row> whole = {{m2012(1), 1000, 800}, {m2012(2), 1000, 0}, {m2012(3), 1000, 0}};
    expect_same(quota(split, m2012(2)), quota(whole, m2012(2)));
    EXPECT_EQ(quota(split, m2012(2)).remaining_prev, 200);
}

TEST(WindowQuota, AnyOrderAndAnySplitGiveTheSameResult) {
    // Whole numbers, so that sums are exact in any order.
    std::mt19937 rng(20120101);
    std::uniform_int_distribution<int> amount(0, 3000);
    std::vector<Row> rows;
    for (int m = 1; m <= 12; ++m) rows.push_back({m2012(m), 1000.0 * (1 + m % 3), double(amount(rng))});
    rows.push_back({m2012(4), 500, double(amount(rng))});  // a second row for April

    for (int at = m2012(1) - 1; at <= m2012(12) + 1; ++at) {
        const wq::Quota expected = quota(rows, at);
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<Row> shuffled = rows;
            std::shuffle(shuffled.begin(), shuffled.end(), rng);
            const std::size_t parts = 1 + rng() % 5;  // some parts may stay empty
            std::vector<wq::State> partial(parts, wq::State{});
            for (const Row& r : shuffled) wq::accumulate(partial[rng() % parts], r.month, r.allowance, r.consumed, at);
            std::shuffle(partial.begin(), partial.end(), rng);
            // Merge pairwise in random order until one state is left.
            while (partial.size() > 1) {
                const std::size_t i = rng() % (partial.size() - 1);
                wq::merge(partial[i], partial[i + 1]);
                partial.erase(partial.begin() + static_cast<std::ptrdiff_t>(i) + 1);
            }
            EXPECT_NO_THROW(wq::validate(partial[0]));
            expect_same(wq::finish(partial[0]), expected);
        }
    }
}

TEST(WindowQuota, EmptyStateIsTheIdentityOfMerge) {
    const wq::State full = state_of(months_2012(1, 1000, {0, 800, 0}), m2012(2));
    wq::State left{};
    wq::merge(left, full);
    wq::State right = full;
    wq::merge(right, wq::State{});
    EXPECT_EQ(std::memcmp(&left, &full, sizeof full), 0);
    EXPECT_EQ(std::memcmp(&right, &full, sizeof full), 0);

    wq::State none{};
    wq::merge(none, wq::State{});
    EXPECT_TRUE(wq::empty(none));
    EXPECT_NO_THROW(wq::validate(none));
}

TEST(WindowQuota, StateSurvivesAByteCopy) {
    const wq::State s = state_of(months_2012(1, 1000, {0, 800, 0, 0}), m2012(3));
    unsigned char bytes[sizeof(wq::State)];
    std::memcpy(bytes, &s, sizeof s);
    wq::State back;
    std::memcpy(&back, bytes, sizeof back);
    EXPECT_NO_THROW(wq::validate(back));
    expect_same(wq::finish(back), wq::finish(s));
}

TEST(WindowQuota, NoRows) {
    const wq::State s{};
    EXPECT_TRUE(wq::empty(s));
    EXPECT_EQ(kind_of([&] { wq::finish(s); }), ErrorKind::invalid_argument);
}

// ---- errors ----

TEST(WindowQuota, MismatchedAtIsRejected) {
    wq::State s = state_of(months_2012(1, 1000, {0, 0}), m2012(2));
    const wq::State before = s;
    EXPECT_EQ(kind_of([&] { wq::accumulate(s, m2012(3), 1000, 0, m2012(3)); }), ErrorKind::invalid_argument);
    EXPECT_EQ(std::memcmp(&s, &before, sizeof s), 0);
    EXPECT_NE(std::string(message_of([&] { wq::accumulate(s, m2012(3), 1000, 0, m2012(3)); })).size(), 0u);

    const wq::State other = state_of({{m2012(3), 1000, 0}}, m2012(3));
    EXPECT_EQ(kind_of([&] { wq::merge(s, other); }), ErrorKind::invalid_argument);
    EXPECT_EQ(std::memcmp(&s, &before, sizeof s), 0);
}

TEST(WindowQuota, BadAmountsAreRejectedByName) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (double bad : {nan, -1.0, inf, -inf, wq::kMaxValue * 2}) {
        wq::State s{};
        EXPECT_EQ(kind_of([&] { wq::accumulate(s, m2012(1), bad, 0, m2012(1)); }), ErrorKind::out_of_range);
        EXPECT_NE(message_of([&] { wq::accumulate(s, m2012(1), bad, 0, m2012(1)); }).find("allowance"),
                  std::string::npos);
        EXPECT_EQ(kind_of([&] { wq::accumulate(s, m2012(1), 0, bad, m2012(1)); }), ErrorKind::out_of_range);
        EXPECT_NE(message_of([&] { wq::accumulate(s, m2012(1), 0, bad, m2012(1)); }).find("consumed"),
                  std::string::npos);
        EXPECT_TRUE(wq::empty(s));
    }
    wq::State s{};
    EXPECT_NO_THROW(wq::accumulate(s, m2012(1), wq::kMaxValue, 0, m2012(1)));
    EXPECT_NO_THROW(wq::accumulate(s, m2012(1), -0.0, 0, m2012(1)));
}

TEST(WindowQuota, MonthIndexOutOfRangeIsRejected) {
    wq::State s{};
    EXPECT_EQ(kind_of([&] { wq::accumulate(s, wq::kMaxMonthIndex + 1, 0, 0, m2012(1)); }),
              ErrorKind::invalid_datetime);
    EXPECT_EQ(kind_of([&] { wq::accumulate(s, m2012(1), 0, 0, std::numeric_limits<int>::min()); }),
              ErrorKind::invalid_datetime);
    EXPECT_TRUE(wq::empty(s));
}

TEST(WindowQuota, ValidateRejectsCorruptStates) {
    const wq::State good = state_of(months_2012(1, 1000, {0, 800, 0}), m2012(2));
    EXPECT_NO_THROW(wq::validate(good));

    auto corrupted = [&](auto change) {
        wq::State s = good;
        change(s);
        return kind_of([&] { wq::validate(s); });
    };
    EXPECT_EQ(corrupted([](wq::State& s) { s.rows = -1; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.at_set = 0; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.first_month = s.last_month + 1; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.total_consumed = -1; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.window_allowance[0] = std::nan(""); }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.total_allowance = 1e300; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.at = wq::kMaxMonthIndex + 1; }), ErrorKind::internal);
    EXPECT_EQ(corrupted([](wq::State& s) { s.last_month = s.at - 1; s.first_month = s.at - 1; }),
              ErrorKind::internal);  // window values in months outside the period
    wq::State junk{};
    junk.total_allowance = 5;
    EXPECT_EQ(kind_of([&] { wq::validate(junk); }), ErrorKind::internal);
}

// ---- helpers ----

TEST(WindowQuota, YearAndMonthOfAnIndex) {
    EXPECT_EQ(wq::year_of(-1), -1);
    EXPECT_EQ(wq::month_of(-1), 12);
    EXPECT_EQ(wq::year_of(0), 0);
    EXPECT_EQ(wq::month_of(0), 1);
    for (int year : {-4713, -1, 0, 1, 2012, 5874897}) {
        for (int month = 1; month <= 12; ++month) {
            const int i = month_index(year, month);
            EXPECT_EQ(wq::year_of(i), year);
            EXPECT_EQ(wq::month_of(i), month);
        }
    }
}

TEST(WindowQuota, StatusNames) {
    EXPECT_STREQ(wq::to_string(Status::normal), "normal");
    EXPECT_STREQ(wq::to_string(Status::low_priority), "low_priority");
    EXPECT_STREQ(wq::to_string(Status::blocked), "blocked");
}
