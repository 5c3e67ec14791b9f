#include "core/bank.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using hpcacct::Error;
using hpcacct::bank::Balance;
using hpcacct::bank::EntryKind;
using hpcacct::bank::State;
namespace bank = hpcacct::bank;

namespace {

int month(int year, int m) { return year * 12 + m - 1; }

}  // namespace

TEST(Bank, QuarterOfMonth) {
    EXPECT_EQ(bank::quarter_of_month(month(2024, 1)), 2024 * 4);
    EXPECT_EQ(bank::quarter_of_month(month(2024, 3)), 2024 * 4);
    EXPECT_EQ(bank::quarter_of_month(month(2024, 4)), 2024 * 4 + 1);
    EXPECT_EQ(bank::quarter_of_month(month(2024, 12)), 2024 * 4 + 3);
    EXPECT_EQ(bank::quarter_of_month(-1), -1);  // December of year -1
    EXPECT_EQ(bank::quarter_of_month(-3), -1);
    EXPECT_EQ(bank::quarter_of_month(-4), -2);
}

TEST(Bank, BalanceOfTheQuarterOnly) {
    State s{};
    const int at = month(2024, 5);
    bank::accumulate(s, EntryKind::deposit, month(2024, 4), 2500, at);
    bank::accumulate(s, EntryKind::charge, month(2024, 5), 1000.25, at);
    bank::accumulate(s, EntryKind::charge, month(2024, 6), 200, at);
    bank::accumulate(s, EntryKind::transfer, month(2024, 4), -300, at);
    bank::accumulate(s, EntryKind::refund, month(2024, 6), 50, at);
    // other quarters do not count: credits do not carry over
    bank::accumulate(s, EntryKind::deposit, month(2024, 1), 2500, at);
    bank::accumulate(s, EntryKind::charge, month(2024, 7), 99, at);
    const Balance b = bank::finish(s);
    EXPECT_EQ(b.quarter, 2024 * 4 + 1);
    EXPECT_DOUBLE_EQ(b.deposits, 2500);
    EXPECT_DOUBLE_EQ(b.charges, 1200.25);
    EXPECT_DOUBLE_EQ(b.transfers, -300);
    EXPECT_DOUBLE_EQ(b.refunds, 50);
    EXPECT_DOUBLE_EQ(b.balance, 1049.75);
}

TEST(Bank, ExactZeroIsNotATinyNegative) {
    State s{};
    const int at = month(2024, 2);
    bank::accumulate(s, EntryKind::deposit, at, 0.3, at);
    for (int i = 0; i < 3; ++i) bank::accumulate(s, EntryKind::charge, at, 0.1, at);
    const Balance b = bank::finish(s);
    EXPECT_EQ(b.balance, 0.0);
    EXPECT_FALSE(std::signbit(b.balance) && b.balance != 0);
}

TEST(Bank, NegativeBalanceAfterALargeJob) {
    State s{};
    const int at = month(2024, 8);
    bank::accumulate(s, EntryKind::deposit, at, 2500, at);
    bank::accumulate(s, EntryKind::charge, at, 2500.000001, at);
    EXPECT_LT(bank::finish(s).balance, 0);
}

TEST(Bank, MergeInAnyOrderGivesTheSameBalance) {
    const int at = month(2024, 11);
    State whole{}, left{}, right{};
    for (int i = 0; i < 100; ++i) {
        const EntryKind kind = i % 3 == 0 ? EntryKind::deposit : EntryKind::charge;
        const double amount = 10.5 + i * 0.125;
        bank::accumulate(whole, kind, month(2024, 10 + i % 3), amount, at);
        bank::accumulate(i % 2 ? left : right, kind, month(2024, 10 + i % 3), amount, at);
    }
    State merged = right;
    bank::merge(merged, left);
    State empty{};
    bank::merge(merged, empty);
    State from_empty{};
    bank::merge(from_empty, merged);
    EXPECT_DOUBLE_EQ(bank::finish(from_empty).balance, bank::finish(whole).balance);
    EXPECT_EQ(from_empty.rows, whole.rows);
}

TEST(Bank, RejectsMixedQuartersAndBadInput) {
    State s{};
    bank::accumulate(s, EntryKind::deposit, month(2024, 1), 1, month(2024, 2));
    EXPECT_THROW(bank::accumulate(s, EntryKind::deposit, month(2024, 1), 1, month(2024, 4)), Error);
    State other{};
    bank::accumulate(other, EntryKind::deposit, month(2024, 4), 1, month(2024, 4));
    EXPECT_THROW(bank::merge(s, other), Error);
    EXPECT_THROW(bank::accumulate(s, EntryKind::charge, month(2024, 1), NAN, month(2024, 2)), Error);
    EXPECT_THROW(bank::accumulate(s, EntryKind::charge, month(2024, 1), INFINITY, month(2024, 2)), Error);
    EXPECT_THROW(bank::parse_entry_kind("grant"), Error);
    EXPECT_EQ(bank::parse_entry_kind("refund"), EntryKind::refund);
}

TEST(Bank, ValidateRejectsCorruptStates) {
    State s{};
    bank::validate(s);
    s.rows = 1;
    EXPECT_THROW(bank::validate(s), Error);  // rows without a quarter
    s.at_set = 1;
    bank::validate(s);
    s.charges.sum = NAN;
    EXPECT_THROW(bank::validate(s), Error);
    State t{};
    t.at_set = 7;
    EXPECT_THROW(bank::validate(t), Error);
}
