#include "core/window_quota.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace hpcacct::window_quota {
namespace {

constexpr int kPrev = 0, kCurrent = 1, kNext = 2;  // positions in the window arrays

// "2012-03", for messages.
std::string month_text(int index) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04d-%02d", year_of(index), month_of(index));
    return buf;
}

void require_month(int index, const char* what) {
    if (index < kMinMonthIndex || index > kMaxMonthIndex) {
        throw Error(ErrorKind::invalid_datetime, std::string(what) + " is out of range",
                    "Month index " + std::to_string(index) + " is outside [" + std::to_string(kMinMonthIndex) +
                        ", " + std::to_string(kMaxMonthIndex) + "].");
    }
}

void require_amount(double value, const char* what) {
    if (!std::isfinite(value) || value < 0) {
        throw Error(ErrorKind::out_of_range, std::string(what) + " must be a finite, non-negative number");
    }
    if (value > kMaxValue) {
        throw Error(ErrorKind::out_of_range, std::string(what) + " is too large",
                    "The largest accepted value is 9007199254740992 (2^53).");
    }
}

[[noreturn]] void at_mismatch(int expected, int got) {
    throw Error(ErrorKind::invalid_argument, "every row of a window quota must name the same month \"at\"",
                "Rows name both " + month_text(expected) + " and " + month_text(got) + ".");
}

[[noreturn]] void corrupt(const char* what) {
    throw Error(ErrorKind::internal, "corrupt window quota state", what);
}

bool amount_ok(double v, double limit) { return std::isfinite(v) && v >= 0 && v <= limit; }

// Position of `month` in the window around `at`, or -1 outside it.
int window_slot(int month, int at) {
    const long long offset = static_cast<long long>(month) - at;
    return offset >= -1 && offset <= 1 ? static_cast<int>(offset + 1) : -1;
}

}  // namespace

int year_of(int index) {
    // Floor division, so that month −1 is December of year −1.
    return index >= 0 ? index / 12 : -((-(index + 1)) / 12) - 1;
}

int month_of(int index) { return index - year_of(index) * 12 + 1; }

void accumulate(State& state, int month, double allowance, double consumed, int at_month) {
    require_amount(allowance, "allowance");
    require_amount(consumed, "consumed");
    require_month(month, "month");
    require_month(at_month, "month \"at\"");
    if (state.at_set && state.at != at_month) at_mismatch(state.at, at_month);

    if (state.rows == 0) {
        state.first_month = state.last_month = month;
    } else {
        state.first_month = std::min(state.first_month, month);
        state.last_month = std::max(state.last_month, month);
    }
    state.at = at_month;
    state.at_set = 1;
    state.rows += 1;
    const int slot = window_slot(month, at_month);
    if (slot >= 0) {
        state.window_allowance[slot] += allowance;
        state.window_consumed[slot] += consumed;
    }
    state.total_allowance += allowance;
    state.total_consumed += consumed;
}

void merge(State& state, const State& other) {
    if (other.rows == 0) return;
    if (state.rows == 0) {
        state = other;
        return;
    }
    if (state.at != other.at) at_mismatch(state.at, other.at);
    std::int64_t rows;  // states read from bytes may hold any count validate() accepts
    if (__builtin_add_overflow(state.rows, other.rows, &rows)) {
        throw Error(ErrorKind::program_limit, "too many rows for a window quota");
    }

    state.first_month = std::min(state.first_month, other.first_month);
    state.last_month = std::max(state.last_month, other.last_month);
    state.rows = rows;
    for (int i = 0; i < 3; ++i) {
        state.window_allowance[i] += other.window_allowance[i];
        state.window_consumed[i] += other.window_consumed[i];
    }
    state.total_allowance += other.total_allowance;
    state.total_consumed += other.total_consumed;
}

void validate(const State& s) {
    if (s.rows < 0) corrupt("negative row count");
    if (s.rows == 0) {
        bool zero = s.at == 0 && s.at_set == 0 && s.first_month == 0 && s.last_month == 0 &&
                    s.total_allowance == 0 && s.total_consumed == 0;
        for (int i = 0; i < 3; ++i) zero = zero && s.window_allowance[i] == 0 && s.window_consumed[i] == 0;
        if (!zero) corrupt("an empty state with data");
        return;
    }
    if (s.at_set != 1) corrupt("rows without a month \"at\"");
    for (int m : {s.at, s.first_month, s.last_month}) {
        if (m < kMinMonthIndex || m > kMaxMonthIndex) corrupt("month out of range");
    }
    if (s.first_month > s.last_month) corrupt("first month after last month");
    // Every value is at most kMaxValue, so a sum is at most rows × kMaxValue.
    const double limit = static_cast<double>(s.rows) * kMaxValue;
    if (!amount_ok(s.total_allowance, limit) || !amount_ok(s.total_consumed, limit)) corrupt("bad total");
    for (int i = 0; i < 3; ++i) {
        if (!amount_ok(s.window_allowance[i], limit) || !amount_ok(s.window_consumed[i], limit)) {
            corrupt("bad window value");
        }
        const long long month = static_cast<long long>(s.at) + i - 1;
        const bool in_period = month >= s.first_month && month <= s.last_month;
        if (!in_period && (s.window_allowance[i] != 0 || s.window_consumed[i] != 0)) {
            corrupt("window value outside the period");
        }
    }
}

Quota finish(const State& s) {
    if (s.rows == 0) {
        throw Error(ErrorKind::invalid_argument, "a window quota needs at least one month");
    }
    Quota q{};
    const bool at_in_period = s.at >= s.first_month && s.at <= s.last_month;
    // Outside the period nothing is transferred or borrowed: the window stays all zero.
    double a[3] = {0, 0, 0}, c[3] = {0, 0, 0};
    if (at_in_period) {
        std::copy(s.window_allowance, s.window_allowance + 3, a);
        std::copy(s.window_consumed, s.window_consumed + 3, c);
    }

    q.monthly = a[kCurrent];
    q.remaining_prev = a[kPrev] - c[kPrev];
    q.consumed_current = c[kCurrent];
    q.consumable = a[kPrev] + a[kCurrent] + a[kNext] - c[kPrev] - c[kCurrent];

    q.consumable_pct_defined = a[kCurrent] > 0;
    if (q.consumable_pct_defined) {
        // × 100 before ÷ A keeps whole percentages exact (1200 × 100 / 1000 = 120).
        double pct = (a[kPrev] + a[kCurrent] - c[kPrev] - c[kCurrent]) * 100 / a[kCurrent];
        if (pct < -100) pct = -101;  // as RWTH's r_wlm_usage shows it
        // A tiny A(at) can overflow the quotient; keep the result finite.
        q.consumable_pct = std::min(pct, std::numeric_limits<double>::max());
    }

    // Both rules are the period's: a month outside it has no quota (low_priority), also
    // after a period that used more than twice its allowances.
    const bool blocked =
        at_in_period && (c[kCurrent] > 6 * a[kCurrent] || s.total_consumed > 2 * s.total_allowance);
    if (blocked) {
        q.state = Quota::Status::blocked;
    } else if (q.consumable > 0) {
        q.state = Quota::Status::normal;
    } else {
        q.state = Quota::Status::low_priority;
    }
    return q;
}

const char* to_string(Quota::Status status) {
    switch (status) {
        case Quota::Status::normal: return "normal";
        case Quota::Status::low_priority: return "low_priority";
        case Quota::Status::blocked: return "blocked";
    }
    throw Error(ErrorKind::internal, "unknown window quota state");
}

}  // namespace hpcacct::window_quota
