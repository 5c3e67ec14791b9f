// Sliding-window quota (rules §3, RWTH): an aggregate over one row per month of an accounting
// period, evaluated for the month `at`.
//
// A(m), C(m): allowance and consumption of month m. The period runs from the first to the
// last month that has a row; A = C = 0 outside it, and for months inside it without a row.
//   consumable(m)     = A(m−1) + A(m) + A(m+1) − C(m−1) − C(m)
//   remaining_prev(m) = A(m−1) − C(m−1)
//   consumable %      = (A(m−1) + A(m) − C(m−1) − C(m)) / A(m) × 100, shown as −101 below −100
//   state: normal while consumable > 0, low_priority once ≤ 0, blocked once C(m) > 6·A(m)
//          or the period's consumption > 2 × its allowance (blocked wins).
//
// Edge cases (README):
//   - `at` outside the period: nothing is transferred or borrowed across its edges, so monthly,
//     remaining_prev, consumed_current, consumable = 0, consumable_pct NULL and the state is
//     low_priority (blocked if the period's consumption exceeds twice its allowance).
//   - A(at) = 0: consumable_pct is NULL; the state follows the rules (normal if a neighbour month
//     lends to it; any use in that month is blocked, since C > 6 × 0).
//   - Rows for one month add up; a month without a row is 0. No rows: NULL, like sum().
//   - Rows naming different `at`: error 22023; allowance or consumed < 0, NaN, ±inf, > 2^53: 22003.
#pragma once
#include "core/core_only.hpp"

#include <cstdint>
#include <type_traits>

namespace hpcacct::window_quota {

// Months are counted as year × 12 + (month − 1), so that consecutive months differ by 1.
// The range covers every finite PostgreSQL date; infinite dates are the glue's to reject.
constexpr int kMinYear = -9999999;
constexpr int kMaxYear = 9999999;
constexpr int kMinMonthIndex = kMinYear * 12;
constexpr int kMaxMonthIndex = kMaxYear * 12 + 11;

// Largest allowance or consumption accepted (integers stay exact up to 2^53).
constexpr double kMaxValue = 9007199254740992.0;

// The year and month (1..12) of a month index (year × 12 + month − 1, as the glue's
// pg::month_index counts).
int year_of(int index);
int month_of(int index);

// Aggregate state. Flat and fixed-size: the glue may copy it byte for byte.
// A value-initialised (all-zero) State is the empty state.
struct State {
    std::int64_t rows;           // number of rows accumulated
    std::int32_t at;             // the evaluation month; meaningful when at_set
    std::int32_t at_set;         // 0 or 1 (an int, so the struct has no padding)
    std::int32_t first_month;    // first and last month with a row; meaningful when rows > 0
    std::int32_t last_month;
    double window_allowance[3];  // A of months at−1, at, at+1
    double window_consumed[3];   // C of months at−1, at, at+1
    double total_allowance;      // over all rows
    double total_consumed;
};
static_assert(std::is_trivially_copyable_v<State> && std::is_standard_layout_v<State>);
static_assert(sizeof(State) == 88, "State must have no padding");

// Adds one row. Throws Error(out_of_range) naming allowance or consumed if it is negative,
// non-finite or above kMaxValue, Error(invalid_datetime) for a month index out of range,
// Error(invalid_argument) if at_month differs from the one of earlier rows.
// The state is unchanged when it throws.
void accumulate(State& state, int month, double allowance, double consumed, int at_month);

// Combines two partial states, in any order; an empty state is the identity.
// Throws Error(invalid_argument) if both have rows and their `at` differ.
void merge(State& state, const State& other);

// Throws Error(internal) unless `state` is one accumulate/merge could have built: for the
// glue to check a state read from bytes it did not write itself.
void validate(const State& state);

inline bool empty(const State& state) { return state.rows == 0; }

struct Quota {
    double monthly;           // A(at)
    double remaining_prev;    // A(at−1) − C(at−1)
    double consumed_current;  // C(at)
    double consumable_pct;    // −101 when below −100; 0 when undefined
    bool consumable_pct_defined;  // false when A(at) = 0
    double consumable;
    enum class Status { normal, low_priority, blocked } state;
};

// The quota in month `at`. Throws Error(invalid_argument) on an empty state: the glue returns
// NULL for an aggregate over no rows instead of calling it.
Quota finish(const State& state);

const char* to_string(Quota::Status status);  // "normal", "low_priority", "blocked"

}  // namespace hpcacct::window_quota
