// Regression tests for what the libFuzzer targets (test/fuzz/) found in the core. Each test
// failed (or, under `make unit-asan`, crashed) before its fix.
#include "core/bank.hpp"
#include "core/charge.hpp"
#include "core/error.hpp"
#include "core/fairshare.hpp"
#include "core/theoretical.hpp"
#include "core/tres.hpp"
#include "core/window_quota.hpp"

#include <gtest/gtest.h>

#include "error_kind.hpp"

#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using hpcacct::Error;
using hpcacct::ErrorKind;
namespace tres = hpcacct::tres;

using hpcacct::testing::kind_of;

namespace {

std::vector<unsigned char> packed(const tres::Vector& v) {
    std::vector<unsigned char> bytes(v.packed_size());
    v.pack(bytes.data());
    return bytes;
}

std::string formatted(const std::vector<unsigned char>& bytes) {
    const tres::View view(bytes.data(), bytes.size());
    std::string out(tres::format_length(view) + 1, '\0');
    tres::format(view, out.data(), out.size());
    out.resize(out.size() - 1);
    return out;
}

std::vector<unsigned char> parsed(const std::string& text) {
    tres::Vector v;
    tres::parse(text, v);
    return packed(v);
}

template <typename State>
bool same_bytes(const State& a, const State& b) {
    return std::memcmp(&a, &b, sizeof(State)) == 0;
}

constexpr std::int64_t kHalfOfInt64 = std::int64_t{1} << 62;

}  // namespace

// tres_binary_fuzz: a tiny memory value, scaled to P, underflowed to 0, which is "whole": it
// printed as "mem=0P" and read back as the empty vector (in(out(x)) != x, and pg_dump loses it).
TEST(FuzzFindings, TinySizeValuesPrintExactly) {
    for (double tiny : {std::numeric_limits<double>::denorm_min(), 1e-310, 0x0.00000000003p-1022}) {
        tres::Vector v;
        tres::insert_checked(v, "mem", tiny);
        const std::vector<unsigned char> bytes = packed(v);
        const std::string text = formatted(bytes);
        EXPECT_NE(text, "mem=0P");
        EXPECT_EQ(parsed(text), bytes) << text;
    }
    // The same value through text input.
    const std::vector<unsigned char> from_text = parsed("mem=0." + std::string(315, '0') + "1");
    EXPECT_EQ(parsed(formatted(from_text)), from_text);
    EXPECT_EQ(formatted(parsed("mem=1.5P,vmem=0.5M")), "mem=1536T,vmem=512K");  // units unchanged
}

// tres_view_fuzz: a corrupt datum with a key longer than kMaxKeyLength (up to 255) was
// accepted by View, and add/scale then copied it into Component::key[128] (stack overflow).
TEST(FuzzFindings, ViewRejectsOverlongKeys) {
    std::vector<unsigned char> bytes = {1, 0, 200};  // one component, key of 200 bytes
    bytes.insert(bytes.end(), 200, 'x');
    bytes.insert(bytes.end(), sizeof(double), 0);
    bytes[3 + 200 + 7] = 0x3f;  // 1/128, any value
    EXPECT_EQ(kind_of([&] { tres::View(bytes.data(), bytes.size()); }), ErrorKind::internal);

    // The longest valid key still works.
    const std::string longest = "license/" + std::string(tres::kMaxKeyLength - 8, 'x');
    const std::vector<unsigned char> ok = parsed(longest + "=1");
    const tres::View view(ok.data(), ok.size());
    tres::Vector sum;
    tres::add(view, view, sum);
    EXPECT_EQ(sum.get(longest), 2);
}

// charge_fuzz: a charge or a number of equivalents that overflows a double came back as
// infinity (and would have gone into the ledger).
TEST(FuzzFindings, ChargesNeverOverflowToInfinity) {
    namespace charge = hpcacct::charge;
    const std::vector<unsigned char> big = parsed("cpu=9007199254740992");
    const std::vector<unsigned char> half = parsed("cpu=0.5");
    const std::vector<unsigned char> tiny = parsed("cpu=0." + std::string(300, '0') + "1");
    const tres::View request(big.data(), big.size()), bundle(half.data(), half.size()),
        tiny_bundle(tiny.data(), tiny.size());
    EXPECT_EQ(kind_of([&] { charge::job_charge(request, 1e300, bundle, 1e300, nullptr); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([&] { charge::job_charge(request, 1e300, bundle, 1e300, &bundle); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([&] { charge::equivalents(request, tiny_bundle); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([&] { charge::whole_nodes(request, tiny_bundle); }), ErrorKind::out_of_range);
    EXPECT_EQ(kind_of([&] { charge::exclusive_equivalents(request, bundle, tiny_bundle); }), ErrorKind::out_of_range);
    EXPECT_EQ(charge::job_charge(request, 2, bundle, 0.5, nullptr), 2.0 * 9007199254740992.0);
}

// bank_state_fuzz (float state, before micro-units): huge amounts gave an infinite balance,
// and a sum that overflowed was refused only later (22003 in a serial plan, XX000 in a
// parallel one). Now: a balance that overflows is an error of finish, a sum that overflows an
// error of the row that makes it, and the state is left as it was.
TEST(FuzzFindings, HugeBankAmountsAreRefusedWhenTheyOverflow) {
    namespace bank = hpcacct::bank;
    const int at = 2024 * 12 + 4;
    const std::int64_t max = INT64_MAX;
    bank::State t{};
    bank::accumulate(t, bank::EntryKind::deposit, at, max, at);
    EXPECT_EQ(bank::finish(t).balance, max);
    bank::accumulate(t, bank::EntryKind::refund, at, max, at);
    EXPECT_EQ(kind_of([&] { bank::finish(t); }), ErrorKind::out_of_range);
}

TEST(FuzzFindings, BankSumOverflowIsRefusedWhenItHappens) {
    namespace bank = hpcacct::bank;
    const int at = 2024 * 12 + 4;
    bank::State s{};
    bank::accumulate(s, bank::EntryKind::deposit, at, INT64_MAX, at);
    const bank::State before = s;
    EXPECT_EQ(kind_of([&] { bank::accumulate(s, bank::EntryKind::deposit, at, 1, at); }), ErrorKind::out_of_range);
    EXPECT_TRUE(same_bytes(s, before));
    EXPECT_NO_THROW(bank::validate(s));
}

// bank_state_fuzz (UBSan): quarter_of_month negated the month index, which overflows an int
// near INT_MIN. Unreachable from SQL (month indexes come from dates), but UB all the same.
TEST(FuzzFindings, QuarterOfAnyMonthIndex) {
    namespace bank = hpcacct::bank;
    EXPECT_EQ(bank::quarter_of_month(INT_MIN), -715827883);  // floor(-2147483648 / 3)
    EXPECT_EQ(bank::quarter_of_month(INT_MIN + 1), -715827883);
    EXPECT_EQ(bank::quarter_of_month(INT_MIN + 2), -715827882);
    EXPECT_EQ(bank::quarter_of_month(INT_MAX), 715827882);
    EXPECT_EQ(bank::quarter_of_month(-1), -1);
    EXPECT_EQ(bank::quarter_of_month(-3), -1);
    EXPECT_EQ(bank::quarter_of_month(-4), -2);
    EXPECT_EQ(bank::quarter_of_month(0), 0);
}

// fairshare_state_fuzz: validate accepted a sum whose compensation outweighs it, and finish
// then returned a negative usage, which no rows can produce.
TEST(FuzzFindings, FairShareValidateRefusesNegativeUsage) {
    namespace fs = hpcacct::fairshare;
    fs::HalfLifeState s{};
    s.rows = 1;
    s.counted = 1;
    s.half_life = 1;
    s.sum.sum = 8.39911597930119e-309;
    s.sum.compensation = -3.189956675896514e-248;
    EXPECT_EQ(kind_of([&] { fs::validate(s); }), ErrorKind::internal);
    fs::IntervalState i{};
    i.rows = 1;
    i.counted = 1;
    i.period = 1;
    i.decay = 0.5;
    i.depth = 1;
    i.sum.sum = 1;
    i.sum.compensation = -2;
    EXPECT_EQ(kind_of([&] { fs::validate(i); }), ErrorKind::internal);
}

// *_state_fuzz (UBSan): merge added the row counts of two states validate() accepts without
// checking for overflow (signed overflow is UB). Now Error(program_limit), state unchanged.
TEST(FuzzFindings, MergedRowCountsCannotOverflow) {
    namespace wq = hpcacct::window_quota;
    namespace bank = hpcacct::bank;
    namespace fs = hpcacct::fairshare;

    wq::State w{};
    w.rows = kHalfOfInt64;
    w.at_set = 1;
    w.at = w.first_month = w.last_month = 2024 * 12;
    ASSERT_NO_THROW(wq::validate(w));
    wq::State w2 = w;
    EXPECT_EQ(kind_of([&] { wq::merge(w2, w); }), ErrorKind::program_limit);
    EXPECT_TRUE(same_bytes(w2, w));

    bank::State b{};
    b.rows = kHalfOfInt64;
    b.at_set = 1;
    b.deposits = 1;
    ASSERT_NO_THROW(bank::validate(b));
    bank::State b2 = b;
    EXPECT_EQ(kind_of([&] { bank::merge(b2, b); }), ErrorKind::program_limit);
    EXPECT_TRUE(same_bytes(b2, b));

    fs::HalfLifeState h{};
    h.rows = h.counted = kHalfOfInt64;
    h.half_life = 1;
    h.sum.sum = 1;
    ASSERT_NO_THROW(fs::validate(h));
    fs::HalfLifeState h2 = h;
    EXPECT_EQ(kind_of([&] { fs::merge(h2, h); }), ErrorKind::program_limit);
    EXPECT_TRUE(same_bytes(h2, h));

    fs::IntervalState i{};
    i.rows = kHalfOfInt64;
    i.period = 1;
    i.decay = 1;
    i.depth = 1;
    ASSERT_NO_THROW(fs::validate(i));
    fs::IntervalState i2 = i;
    EXPECT_EQ(kind_of([&] { fs::merge(i2, i); }), ErrorKind::program_limit);
    EXPECT_TRUE(same_bytes(i2, i));

    // Below the limit, counts still add.
    w2.rows = 1;
    wq::merge(w2, w);
    EXPECT_EQ(w2.rows, kHalfOfInt64 + 1);
}
