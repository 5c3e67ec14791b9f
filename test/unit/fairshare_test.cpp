// Fair share (rules §5): decayed usage (Slurm half-life, Maui periods) and the factor.
#include "core/fairshare.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include "error_kind.hpp"

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace fs = hpcacct::fairshare;
using hpcacct::Error;
using hpcacct::ErrorKind;

using hpcacct::testing::kind_of;

namespace {

constexpr std::int64_t kHour = INT64_C(3600000000);
constexpr std::int64_t kDay = 24 * kHour;
constexpr std::int64_t kWeek = 7 * kDay;  // Slurm's default PriorityDecayHalfLife
// 2024-03-15 00:00 UTC in PostgreSQL's microseconds since 2000-01-01; any value would do.
constexpr std::int64_t kAt = INT64_C(763776000000000);

struct Row {
    std::int64_t ts;
    double amount;
};

double half_life_usage(const std::vector<Row>& rows, std::int64_t at, std::int64_t half_life) {
    fs::HalfLifeState s{};
    for (const Row& r : rows) fs::accumulate(s, r.ts, r.amount, at, half_life);
    return fs::finish(s);
}

double interval_usage(const std::vector<Row>& rows, std::int64_t at, std::int64_t period, double decay, int depth) {
    fs::IntervalState s{};
    for (const Row& r : rows) fs::accumulate(s, r.ts, r.amount, at, period, decay, depth);
    return fs::finish(s);
}

template <typename State>
bool same_bytes(const State& a, const State& b) {
    return std::memcmp(&a, &b, sizeof(State)) == 0;
}

}  // namespace

// ---- half-life form: Σ amount × 2^(−(at − ts)/half_life) ----

TEST(DecayedUsage, WholeHalfLivesHalveExactly) {
    // 10 now, 8 one half-life ago (4), 8 two ago (2), 16 three ago (2): 18.
    const double u = half_life_usage({{kAt, 10}, {kAt - kWeek, 8}, {kAt - 2 * kWeek, 8}, {kAt - 3 * kWeek, 16}},
                                     kAt, kWeek);
    EXPECT_EQ(u, 18);
}

TEST(DecayedUsage, FractionsOfAHalfLife) {
    // Half a half-life: 100 / √2 = 70.710678118654752...
    EXPECT_NEAR(half_life_usage({{kAt - kWeek / 2, 100}}, kAt, kWeek), 70.710678118654752, 1e-12);
    // One day with a 7-day half-life: 2^(−1/7) = 0.90572366426390...
    EXPECT_NEAR(half_life_usage({{kAt - kDay, 1}}, kAt, kWeek), 0.9057236642639067, 1e-15);
    // 36 hours with a 12-hour half-life: 2^−3 = 1/8 of 1000.
    EXPECT_EQ(half_life_usage({{kAt - 36 * kHour, 1000}}, kAt, 12 * kHour), 125);
}

TEST(DecayedUsage, RowsAfterAtCountZero) {
    fs::HalfLifeState s{};
    fs::accumulate(s, kAt + 1, 100, kAt, kWeek);
    fs::accumulate(s, kAt + kWeek, 100, kAt, kWeek);
    EXPECT_EQ(s.rows, 2);
    EXPECT_EQ(s.counted, 0);
    EXPECT_EQ(fs::finish(s), 0);  // rows, none counted: 0, not "no rows"
    fs::accumulate(s, kAt, 5, kAt, kWeek);  // `at` itself counts, with weight 1
    EXPECT_EQ(fs::finish(s), 5);
    EXPECT_EQ(fs::half_life_weight(kAt + 1, kAt, kWeek), 0);
    EXPECT_EQ(fs::half_life_weight(kAt, kAt, kWeek), 1);
    EXPECT_EQ(fs::half_life_weight(kAt - kWeek, kAt, kWeek), 0.5);
}

TEST(DecayedUsage, ReadmeWorkedExample) {
    // The README's example at 2024-03-15 00:00, half-life 7 days: lattice 1 200 GPU-hours
    // ended 7 days before (600), hadron 400 ended 14 days before (100), nuclear 300 ended at
    // `at` (300). Pool total 1 000; shares 0.6, 0.3, 0.1.
    const double lattice = half_life_usage({{kAt - kWeek, 1200}}, kAt, kWeek);
    const double hadron = half_life_usage({{kAt - 2 * kWeek, 400}}, kAt, kWeek);
    const double nuclear = half_life_usage({{kAt, 300}}, kAt, kWeek);
    EXPECT_EQ(lattice, 600);
    EXPECT_EQ(hadron, 100);
    EXPECT_EQ(nuclear, 300);
    const double total = lattice + hadron + nuclear;
    EXPECT_EQ(fs::factor(lattice / total, 1800.0 / 3000), 0.5);                       // 2^(−0.6/0.6)
    EXPECT_NEAR(fs::factor(hadron / total, 900.0 / 3000), 0.79370052598409974, 1e-15);  // 2^(−1/3)
    EXPECT_NEAR(fs::factor(nuclear / total, 300.0 / 3000), 0.125, 1e-15);              // 2^−3
    // The same usage with Maui periods of 5 days decaying by 0.5: 7 days ago is period 1
    // (× 0.5), 14 days ago period 2 (× 0.25), so the figures are the same.
    EXPECT_EQ(interval_usage({{kAt - kWeek, 1200}}, kAt, 5 * kDay, 0.5, 4), 600);
    EXPECT_EQ(interval_usage({{kAt - 2 * kWeek, 400}}, kAt, 5 * kDay, 0.5, 4), 100);
    EXPECT_EQ(interval_usage({{kAt, 300}}, kAt, 5 * kDay, 0.5, 4), 300);
}

TEST(DecayedUsage, VeryOldRowsWeighNothing) {
    const std::int64_t min = std::numeric_limits<std::int64_t>::min();
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    EXPECT_EQ(fs::half_life_weight(min, max, kWeek), 0);  // at − ts overflows
    EXPECT_EQ(fs::half_life_weight(kAt - 2000 * kWeek, kAt, kWeek), 0);  // 2^−2000 underflows
    EXPECT_EQ(fs::period_index(min, max, kDay), max);
    EXPECT_EQ(interval_usage({{min, 5}}, max, kDay, 1, 1000), 0);
}

// ---- interval form: Σ_i decay^i × usage(period i), period i = (at − (i+1)P, at − iP] ----

TEST(DecayedUsagePeriods, PeriodsEndAtAt) {
    const std::int64_t p = 5 * kDay;
    EXPECT_EQ(fs::period_index(kAt, kAt, p), 0);
    EXPECT_EQ(fs::period_index(kAt - p + 1, kAt, p), 0);
    EXPECT_EQ(fs::period_index(kAt - p, kAt, p), 1);  // the boundary belongs to the older period
    EXPECT_EQ(fs::period_index(kAt - 2 * p, kAt, p), 2);
    EXPECT_EQ(fs::period_index(kAt + 1, kAt, p), -1);
}

TEST(DecayedUsagePeriods, HandComputed) {
    // 5-day periods, decay 0.5, depth 3: period 0 holds 10 and 20, period 1 holds 40 (× 0.5),
    // period 2 holds 80 (× 0.25); 1 000 in period 3 is beyond the depth; 7 after `at` is
    // not counted. 10 + 20 + 20 + 20 = 70.
    const std::int64_t p = 5 * kDay;
    const double u = interval_usage({{kAt, 10}, {kAt - p + 1, 20}, {kAt - p, 40}, {kAt - 12 * kDay, 80},
                                     {kAt - 15 * kDay, 1000}, {kAt + 1, 7}},
                                    kAt, p, 0.5, 3);
    EXPECT_EQ(u, 70);
}

TEST(DecayedUsagePeriods, MauiDefaults) {
    // 100 in each of periods 0..8 with decay 0.8 and depth 8: period 8 is ignored, and
    // 100 × (1 + 0.8 + 0.64 + 0.512 + 0.4096 + 0.32768 + 0.262144 + 0.2097152) = 416.11392.
    std::vector<Row> rows;
    for (int i = 0; i <= 8; ++i) rows.push_back({kAt - i * 5 * kDay - kHour, 100});
    EXPECT_NEAR(interval_usage(rows, kAt, 5 * kDay, 0.8, 8), 416.11392, 1e-10);
}

TEST(DecayedUsagePeriods, DecayZeroAndOne) {
    const std::vector<Row> rows = {{kAt - kHour, 1}, {kAt - 25 * kHour, 2}, {kAt - 49 * kHour, 4}};
    EXPECT_EQ(interval_usage(rows, kAt, kDay, 0, 3), 1);  // 0^0 = 1: only period 0
    EXPECT_EQ(interval_usage(rows, kAt, kDay, 1, 3), 7);  // no decay: the plain sum
    EXPECT_EQ(interval_usage(rows, kAt, kDay, 1, 2), 3);  // depth 2 leaves period 2 out
}

// ---- aggregate behaviour ----

TEST(DecayedUsage, MergeInAnyOrderEqualsOnePass) {
    std::mt19937_64 rng(6);
    std::uniform_int_distribution<std::int64_t> age(-kDay, 120 * kDay);
    std::uniform_real_distribution<double> amount(0, 5000);
    fs::HalfLifeState whole{}, parts[3]{};
    fs::IntervalState iwhole{}, iparts[3]{};
    for (int i = 0; i < 3000; ++i) {
        const std::int64_t ts = kAt - age(rng);
        const double a = amount(rng);
        fs::accumulate(whole, ts, a, kAt, kWeek);
        fs::accumulate(parts[i % 3], ts, a, kAt, kWeek);
        fs::accumulate(iwhole, ts, a, kAt, 5 * kDay, 0.8, 8);
        fs::accumulate(iparts[i % 3], ts, a, kAt, 5 * kDay, 0.8, 8);
    }
    fs::HalfLifeState forward{}, backward{};
    fs::IntervalState iforward{}, ibackward{};
    for (int i = 0; i < 3; ++i) {
        fs::merge(forward, parts[i]);
        fs::merge(backward, parts[2 - i]);
        fs::merge(iforward, iparts[i]);
        fs::merge(ibackward, iparts[2 - i]);
    }
    const double expected = fs::finish(whole);
    EXPECT_NEAR(fs::finish(forward), expected, expected * 1e-14);
    EXPECT_NEAR(fs::finish(backward), expected, expected * 1e-14);
    EXPECT_EQ(forward.rows, 3000);
    EXPECT_EQ(forward.counted, whole.counted);
    const double iexpected = fs::finish(iwhole);
    EXPECT_NEAR(fs::finish(iforward), iexpected, iexpected * 1e-14);
    EXPECT_NEAR(fs::finish(ibackward), iexpected, iexpected * 1e-14);
    EXPECT_EQ(iforward.counted, iwhole.counted);
    EXPECT_NO_THROW(fs::validate(forward));
    EXPECT_NO_THROW(fs::validate(iforward));
}

TEST(DecayedUsage, EmptyStateIsTheIdentity) {
    fs::HalfLifeState s{}, empty{};
    fs::accumulate(s, kAt - kWeek, 8, kAt, kWeek);
    const fs::HalfLifeState before = s;
    fs::merge(s, empty);
    EXPECT_TRUE(same_bytes(s, before));
    fs::merge(empty, s);
    EXPECT_TRUE(same_bytes(empty, before));
    EXPECT_TRUE(fs::empty(fs::HalfLifeState{}));
    EXPECT_EQ(kind_of([] { fs::finish(fs::HalfLifeState{}); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([] { fs::finish(fs::IntervalState{}); }), ErrorKind::invalid_argument);
}

TEST(DecayedUsage, ParametersMustAgree) {
    fs::HalfLifeState s{};
    fs::accumulate(s, kAt, 1, kAt, kWeek);
    const fs::HalfLifeState before = s;
    EXPECT_EQ(kind_of([&] { fs::accumulate(s, kAt, 1, kAt + 1, kWeek); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(s, kAt, 1, kAt, kDay); }), ErrorKind::invalid_argument);
    EXPECT_TRUE(same_bytes(s, before));  // unchanged when it throws
    fs::HalfLifeState other{};
    fs::accumulate(other, kAt, 1, kAt, kDay);
    EXPECT_EQ(kind_of([&] { fs::merge(s, other); }), ErrorKind::invalid_argument);

    fs::IntervalState i{};
    fs::accumulate(i, kAt, 1, kAt, kDay, 0.5, 3);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt - 1, kDay, 0.5, 3); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kHour, 0.5, 3); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kDay, 0.6, 3); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kDay, 0.5, 4); }), ErrorKind::invalid_argument);
    fs::IntervalState j{};
    fs::accumulate(j, kAt, 1, kAt, kDay, 0.5, 4);
    EXPECT_EQ(kind_of([&] { fs::merge(i, j); }), ErrorKind::invalid_argument);
}

TEST(DecayedUsage, BadArguments) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    fs::HalfLifeState s{};
    for (double bad : {-1.0, -1e-300, nan, inf, -inf, 9007199254740994.0}) {
        EXPECT_EQ(kind_of([&] { fs::accumulate(s, kAt, bad, kAt, kWeek); }), ErrorKind::out_of_range) << bad;
    }
    EXPECT_EQ(kind_of([&] { fs::accumulate(s, kAt, 1, kAt, 0); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(s, kAt, 1, kAt, -kWeek); }), ErrorKind::invalid_argument);
    EXPECT_TRUE(fs::empty(s));
    fs::accumulate(s, kAt, 0, kAt, kWeek);  // zero is a valid amount
    fs::accumulate(s, kAt, 9007199254740992.0, kAt, kWeek);
    EXPECT_EQ(fs::finish(s), 9007199254740992.0);

    fs::IntervalState i{};
    for (double bad : {-0.1, 1.5, nan, inf}) {
        EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kDay, bad, 3); }), ErrorKind::out_of_range) << bad;
    }
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kDay, 0.5, 0); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, kDay, 0.5, -3); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, 1, kAt, 0, 0.5, 3); }), ErrorKind::invalid_argument);
    EXPECT_EQ(kind_of([&] { fs::accumulate(i, kAt, -1, kAt, kDay, 0.5, 3); }), ErrorKind::out_of_range);
    EXPECT_TRUE(fs::empty(i));
}

TEST(DecayedUsage, ValidateRejectsCorruptStates) {
    fs::HalfLifeState good{};
    fs::accumulate(good, kAt - kWeek, 10, kAt, kWeek);
    fs::accumulate(good, kAt + kWeek, 10, kAt, kWeek);
    EXPECT_NO_THROW(fs::validate(good));
    EXPECT_NO_THROW(fs::validate(fs::HalfLifeState{}));

    auto corrupt = [](fs::HalfLifeState s) { return kind_of([&] { fs::validate(s); }); };
    fs::HalfLifeState s = good;
    s.rows = -1;
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.counted = 3;
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.half_life = 0;
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.sum.sum = std::numeric_limits<double>::quiet_NaN();
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.sum.sum = -1;
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.sum.sum = 2 * 9007199254740992.0;  // more than one row of the largest amount
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = fs::HalfLifeState{};
    s.at = 1;  // empty, with data
    EXPECT_EQ(corrupt(s), ErrorKind::internal);
    s = good;
    s.counted = 0;  // a sum without counted rows
    EXPECT_EQ(corrupt(s), ErrorKind::internal);

    fs::IntervalState igood{};
    fs::accumulate(igood, kAt, 10, kAt, kDay, 0.5, 3);
    EXPECT_NO_THROW(fs::validate(igood));
    EXPECT_NO_THROW(fs::validate(fs::IntervalState{}));
    auto icorrupt = [](fs::IntervalState i) { return kind_of([&] { fs::validate(i); }); };
    fs::IntervalState i = igood;
    i.reserved = 1;
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
    i = igood;
    i.decay = 1.5;
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
    i = igood;
    i.decay = std::numeric_limits<double>::quiet_NaN();
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
    i = igood;
    i.depth = 0;
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
    i = igood;
    i.period = -kDay;
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
    i = fs::IntervalState{};
    i.depth = 3;
    EXPECT_EQ(icorrupt(i), ErrorKind::internal);
}

// ---- the factor 2^(−usage/share) ----

TEST(FairShareFactor, HandComputed) {
    EXPECT_EQ(fs::factor(0, 0.5), 1);        // no usage: the highest factor
    EXPECT_EQ(fs::factor(0.5, 0.5), 0.5);    // usage on target: one half
    EXPECT_EQ(fs::factor(1, 0.5), 0.25);     // twice the target
    EXPECT_EQ(fs::factor(0.25, 0.5), std::exp2(-0.5));
    EXPECT_NEAR(fs::factor(0.25, 0.5), 0.70710678118654752, 1e-16);
    EXPECT_EQ(fs::factor(0, 0), 0);          // no shares: nothing is owed
    EXPECT_EQ(fs::factor(0.3, 0), 0);
    EXPECT_EQ(fs::factor(1, 1e-320), 0);     // usage / share overflows: 2^−inf
}

TEST(FairShareFactor, BadArguments) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (double bad : {-0.1, nan, inf}) {
        EXPECT_EQ(kind_of([&] { fs::factor(bad, 0.5); }), ErrorKind::out_of_range) << bad;
        EXPECT_EQ(kind_of([&] { fs::factor(0.5, bad); }), ErrorKind::out_of_range) << bad;
    }
}
