// Fair share (rules §5, Fermilab LQCD and Compute Canada): decayed usage and the fair-share
// factor.
//
// Two forms of decayed usage, each an aggregate over (ts, amount) rows evaluated at an
// instant `at`. Times are microseconds on any fixed epoch (only differences matter):
//
//   half-life (Slurm):  U = Σ amount × 2^(−(at − ts) / half_life)
//   interval (Maui):    U = Σ_{i < depth} decay^i × usage(period i)
//                       period i = (at − (i+1)·period, at − i·period]: periods end at `at`,
//                       period 0 is the one that ends at `at` (it contains `at` itself), so a
//                       row's period is floor((at − ts) / period); rows of period ≥ depth are
//                       ignored. 0^0 = 1: with decay 0 only period 0 counts.
//
// In both forms a row dated after `at` has not happened yet at `at`: it counts 0 (but is
// still validated). Every row must name the same `at` and the same decay parameters.
//
// The fair-share factor (Slurm's classic formula) is 2^(−usage / share) for a normalized
// usage and share; a zero share gives 0.
#pragma once
#include "core/core_only.hpp"

#include "core/theoretical.hpp"

#include <cstdint>
#include <type_traits>

namespace hpcacct::fairshare {

using Sum = theoretical::Sum;

// Largest accepted amount (integers stay exact up to 2^53); sums cannot overflow a double.
constexpr double kMaxAmount = 9007199254740992.0;

// Aggregate state of the half-life form. Flat and fixed-size: the glue may copy it byte for
// byte. A value-initialised (all-zero) state is the empty state; rows > 0 implies at and
// half_life are set.
struct HalfLifeState {
    std::int64_t rows;       // rows accumulated, those dated after `at` included
    std::int64_t counted;    // rows dated at or before `at`
    std::int64_t at;         // microseconds
    std::int64_t half_life;  // microseconds, > 0
    Sum sum;                 // Σ amount × weight over the counted rows
};
static_assert(std::is_trivially_copyable_v<HalfLifeState> && std::is_standard_layout_v<HalfLifeState>);
static_assert(sizeof(HalfLifeState) == 48, "HalfLifeState must have no padding");

// Aggregate state of the interval form; same conventions.
struct IntervalState {
    std::int64_t rows;     // rows accumulated, those dated after `at` included
    std::int64_t counted;  // rows within the depth (0 ≤ i < depth)
    std::int64_t at;       // microseconds
    std::int64_t period;   // microseconds, > 0
    double decay;          // 0 ≤ decay ≤ 1
    std::int32_t depth;    // ≥ 1
    std::int32_t reserved; // always 0 (so the struct has no padding)
    Sum sum;               // Σ decay^i × amount over the counted rows
};
static_assert(std::is_trivially_copyable_v<IntervalState> && std::is_standard_layout_v<IntervalState>);
static_assert(sizeof(IntervalState) == 64, "IntervalState must have no padding");

// Weight of a row dated `ts` at `at`: 2^(−(at − ts)/half_life), 0 when ts > at.
// Throws Error(invalid_argument) unless half_life > 0.
double half_life_weight(std::int64_t ts, std::int64_t at, std::int64_t half_life);

// Period index floor((at − ts) / period) of a row dated `ts`, −1 when ts > at, and
// INT64_MAX when the difference overflows. Throws Error(invalid_argument) unless period > 0.
std::int64_t period_index(std::int64_t ts, std::int64_t at, std::int64_t period);

// Adds one row. Throws Error(out_of_range) if amount is negative, non-finite or above
// kMaxAmount, or if decay is outside [0, 1] or not finite; Error(invalid_argument) if
// half_life or period is not positive, depth < 1, or the parameters differ from those of
// earlier rows. The state is unchanged when it throws.
void accumulate(HalfLifeState& state, std::int64_t ts, double amount, std::int64_t at, std::int64_t half_life);
void accumulate(IntervalState& state, std::int64_t ts, double amount, std::int64_t at, std::int64_t period,
                double decay, int depth);

// Combines two partial states, in any order; an empty state is the identity.
// Throws Error(invalid_argument) if both have rows and their parameters differ.
void merge(HalfLifeState& state, const HalfLifeState& other);
void merge(IntervalState& state, const IntervalState& other);

// Throws Error(internal) unless the state is one accumulate/merge could have built: for the
// glue to check a state read from bytes it did not write itself.
void validate(const HalfLifeState& state);
void validate(const IntervalState& state);

inline bool empty(const HalfLifeState& state) { return state.rows == 0; }
inline bool empty(const IntervalState& state) { return state.rows == 0; }

// The decayed usage. Throws Error(invalid_argument) on an empty state: the glue returns NULL
// for an aggregate over no rows instead of calling it.
double finish(const HalfLifeState& state);
double finish(const IntervalState& state);

// 2^(−usage / share). Both must be finite and non-negative (Error(out_of_range) otherwise);
// share 0 gives 0 (nothing is owed to an account without shares).
double factor(double usage, double share);

}  // namespace hpcacct::fairshare
