#include "core/bank.hpp"
#include "core/error.hpp"

#include "error_kind.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

using hpcacct::Error;
using hpcacct::ErrorKind;
using hpcacct::bank::Balance;
using hpcacct::bank::EntryKind;
using hpcacct::bank::State;
using hpcacct::testing::kind_of;
namespace bank = hpcacct::bank;

namespace {

int month(int year, int m) { return year * 12 + m - 1; }

std::int64_t micro(const char* text) { return bank::parse_micro_units(text); }

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

TEST(Bank, ParsesNumericTextToMicroUnits) {
    EXPECT_EQ(micro("0"), 0);
    EXPECT_EQ(micro("7"), 7000000);
    EXPECT_EQ(micro("-12.5"), -12500000);
    EXPECT_EQ(micro("0.000001"), 1);
    EXPECT_EQ(micro("-0.000001"), -1);
    EXPECT_EQ(micro("2500.000001"), 2500000001);
    EXPECT_EQ(micro("9930.000000"), 9930000000);
    EXPECT_EQ(micro(".5"), 500000);
    // more than 6 decimals: half away from zero, as numeric's round(x, 6)
    EXPECT_EQ(micro("0.0000005"), 1);
    EXPECT_EQ(micro("0.00000049999999"), 0);
    EXPECT_EQ(micro("-0.0000005"), -1);
    EXPECT_EQ(micro("-0.0000004"), 0);
    EXPECT_EQ(micro("1.23456789012345678901"), 1234568);
    EXPECT_EQ(micro("1234567.8999995"), 1234567900000);  // the rounding carries into the integer part
    // the ends of int64
    EXPECT_EQ(micro("9223372036854.775807"), std::numeric_limits<std::int64_t>::max());
    EXPECT_EQ(micro("-9223372036854.775808"), std::numeric_limits<std::int64_t>::min());
    EXPECT_EQ(kind_of([] { micro("9223372036854.775808"); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { micro("9223372036854.7758075"); }), ErrorKind::out_of_range);  // rounds past it
    EXPECT_EQ(kind_of([] { micro("-9223372036854.775809"); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { micro("100000000000000000000"); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { micro("NaN"); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { micro("Infinity"); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { micro("-Infinity"); }), ErrorKind::out_of_range);
    for (const char* bad : {"", "-", ".", "1e5", "1.2.3", " 1", "+1", "1,5", "--1"}) {
        EXPECT_EQ(kind_of([&] { micro(bad); }), ErrorKind::invalid_text) << bad;
    }
}

TEST(Bank, Float8AmountsOfTheOldDeclaration) {
    EXPECT_EQ(bank::micro_units_of_double(2500.25), 2500250000);
    EXPECT_EQ(bank::micro_units_of_double(0.1), 100000);
    EXPECT_EQ(bank::micro_units_of_double(-0.0000005), -1);
    EXPECT_EQ(kind_of([] { bank::micro_units_of_double(1e13); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { bank::micro_units_of_double(std::numeric_limits<double>::quiet_NaN()); }),
              ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([] { bank::micro_units_of_double(-std::numeric_limits<double>::infinity()); }),
              ErrorKind::out_of_range);
}

TEST(Bank, BalanceOfTheQuarterOnly) {
    State s{};
    const int at = month(2024, 5);
    bank::accumulate(s, EntryKind::deposit, month(2024, 4), micro("2500"), at);
    bank::accumulate(s, EntryKind::charge, month(2024, 5), micro("1000.25"), at);
    bank::accumulate(s, EntryKind::charge, month(2024, 6), micro("200"), at);
    bank::accumulate(s, EntryKind::transfer, month(2024, 4), micro("-300"), at);
    bank::accumulate(s, EntryKind::refund, month(2024, 6), micro("50"), at);
    // other quarters do not count: credits do not carry over
    bank::accumulate(s, EntryKind::deposit, month(2024, 1), micro("2500"), at);
    bank::accumulate(s, EntryKind::charge, month(2024, 7), micro("99"), at);
    const Balance b = bank::finish(s);
    EXPECT_EQ(b.quarter, 2024 * 4 + 1);
    EXPECT_EQ(b.deposits, 2500000000);
    EXPECT_EQ(b.charges, 1200250000);
    EXPECT_EQ(b.transfers, -300000000);
    EXPECT_EQ(b.refunds, 50000000);
    EXPECT_EQ(b.balance, 1049750000);
}

TEST(Bank, ExactWhereFloatIsNot) {
    State s{};
    const int at = month(2024, 2);
    bank::accumulate(s, EntryKind::deposit, at, micro("0.3"), at);
    for (int i = 0; i < 3; ++i) bank::accumulate(s, EntryKind::charge, at, micro("0.1"), at);
    EXPECT_EQ(bank::finish(s).balance, 0);
    // a large deposit and a millionth: a double holds about 16 digits, these are 19
    State t{};
    bank::accumulate(t, EntryKind::deposit, at, micro("9000000000000.000001"), at);
    bank::accumulate(t, EntryKind::charge, at, micro("8999999999999.999999"), at);
    EXPECT_EQ(bank::finish(t).balance, 2);
}

TEST(Bank, NegativeBalanceAfterALargeJob) {
    State s{};
    const int at = month(2024, 8);
    bank::accumulate(s, EntryKind::deposit, at, micro("2500"), at);
    bank::accumulate(s, EntryKind::charge, at, micro("2500.000001"), at);
    EXPECT_EQ(bank::finish(s).balance, -1);
}

TEST(Bank, OverflowIsAnErrorAndChangesNothing) {
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    const int at = month(2024, 8);
    State s{};
    bank::accumulate(s, EntryKind::deposit, at, max, at);
    const State before = s;
    EXPECT_EQ(kind_of([&] { bank::accumulate(s, EntryKind::deposit, at, 1, at); }), ErrorKind::out_of_range);
    EXPECT_EQ(s.rows, before.rows);
    EXPECT_EQ(s.deposits, before.deposits);
    // each sum fits, the balance does not
    bank::accumulate(s, EntryKind::charge, at, -1, at);
    EXPECT_EQ(kind_of([&] { bank::finish(s); }), ErrorKind::out_of_range);
    // a partial sum would not fit, the balance does (fuzz finding)
    State p{};
    bank::accumulate(p, EntryKind::deposit, at, max, at);
    bank::accumulate(p, EntryKind::transfer, at, 1, at);
    bank::accumulate(p, EntryKind::charge, at, 1, at);
    EXPECT_EQ(bank::finish(p).balance, max);
    State other{};
    bank::accumulate(other, EntryKind::deposit, at, 1, at);
    const State kept = s;
    EXPECT_EQ(kind_of([&] { bank::merge(s, other); }), ErrorKind::out_of_range);
    EXPECT_EQ(s.rows, kept.rows);
    EXPECT_EQ(s.deposits, kept.deposits);
}

TEST(Bank, MergeInAnyOrderGivesTheSameBalance) {
    const int at = month(2024, 11);
    State whole{}, left{}, right{};
    for (int i = 0; i < 100; ++i) {
        const EntryKind kind = i % 3 == 0 ? EntryKind::deposit : EntryKind::charge;
        const std::int64_t amount = 10500000 + i * 125001;
        bank::accumulate(whole, kind, month(2024, 10 + i % 3), amount, at);
        bank::accumulate(i % 2 ? left : right, kind, month(2024, 10 + i % 3), amount, at);
    }
    State merged = right;
    bank::merge(merged, left);
    State empty{};
    bank::merge(merged, empty);
    State from_empty{};
    bank::merge(from_empty, merged);
    EXPECT_EQ(bank::finish(from_empty).balance, bank::finish(whole).balance);
    EXPECT_EQ(bank::finish(from_empty).charges, bank::finish(whole).charges);
    EXPECT_EQ(from_empty.rows, whole.rows);
}

TEST(Bank, RejectsMixedQuartersAndBadInput) {
    State s{};
    bank::accumulate(s, EntryKind::deposit, month(2024, 1), 1, month(2024, 2));
    EXPECT_THROW(bank::accumulate(s, EntryKind::deposit, month(2024, 1), 1, month(2024, 4)), Error);
    State other{};
    bank::accumulate(other, EntryKind::deposit, month(2024, 4), 1, month(2024, 4));
    EXPECT_THROW(bank::merge(s, other), Error);
    EXPECT_THROW(bank::parse_entry_kind("grant"), Error);
    try {  // a long kind is shown shortened, not copied whole into the message
        bank::parse_entry_kind(std::string(1 << 20, 'k'));
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_LT(std::string(e.what()).size(), 200u);
    }
    EXPECT_EQ(bank::parse_entry_kind("refund"), EntryKind::refund);
}

TEST(Bank, ValidateRejectsCorruptStates) {
    State s{};
    bank::validate(s);
    s.rows = 1;
    EXPECT_THROW(bank::validate(s), Error);  // rows without a quarter
    s.at_set = 1;
    bank::validate(s);
    s.rows = -1;
    EXPECT_THROW(bank::validate(s), Error);
    State t{};
    t.at_set = 7;
    EXPECT_THROW(bank::validate(t), Error);
}
