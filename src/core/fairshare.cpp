#include "core/fairshare.hpp"

#include "core/error.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace hpcacct::fairshare {
namespace {

void require_amount(double amount) {
    if (!std::isfinite(amount) || amount < 0) {
        throw Error(ErrorKind::out_of_range, "decayed_usage: amount must be a finite, non-negative number");
    }
    if (amount > kMaxAmount) {
        throw Error(ErrorKind::out_of_range, "decayed_usage: amount is too large",
                    "The largest accepted amount is 9007199254740992 (2^53).");
    }
}

void require_positive(std::int64_t usecs, const char* what) {
    if (usecs <= 0) {
        throw Error(ErrorKind::invalid_argument, std::string("decayed_usage: ") + what + " must be positive");
    }
}

void require_decay(double decay, int depth) {
    if (!std::isfinite(decay) || decay < 0 || decay > 1) {
        throw Error(ErrorKind::out_of_range, "decayed_usage: decay factor must be between 0 and 1");
    }
    if (depth < 1) {
        throw Error(ErrorKind::invalid_argument, "decayed_usage: depth must be at least 1",
                    "Got " + std::to_string(depth) + ".");
    }
}

[[noreturn]] void mismatch(const char* what) {
    throw Error(ErrorKind::invalid_argument,
                std::string("decayed_usage: every row must name the same ") + what);
}

// rows + other_rows, counted + other_counted; states read from bytes may hold any counts
// validate() accepts.
void add_counts(std::int64_t& rows, std::int64_t& counted, std::int64_t other_rows, std::int64_t other_counted) {
    std::int64_t new_rows, new_counted;
    if (__builtin_add_overflow(rows, other_rows, &new_rows) ||
        __builtin_add_overflow(counted, other_counted, &new_counted)) {
        throw Error(ErrorKind::program_limit, "decayed_usage: too many rows");
    }
    rows = new_rows;
    counted = new_counted;
}

[[noreturn]] void corrupt(const char* what) {
    throw Error(ErrorKind::internal, "corrupt decayed usage state", what);
}

// A sum of `counted` non-negative terms of at most kMaxAmount each.
void validate_sum(const Sum& sum, std::int64_t counted) {
    const double limit = static_cast<double>(counted) * kMaxAmount;
    if (!std::isfinite(sum.sum) || !std::isfinite(sum.compensation)) corrupt("non-finite sum");
    if (sum.sum < 0 || sum.sum > limit || std::fabs(sum.compensation) > limit) corrupt("sum out of range");
    if (sum.sum + sum.compensation < 0) corrupt("negative usage");  // finish would return it
    if (counted == 0 && (sum.sum != 0 || sum.compensation != 0)) corrupt("a sum without rows");
}

void validate_counts(std::int64_t rows, std::int64_t counted) {
    if (rows < 0 || counted < 0 || counted > rows) corrupt("bad row counts");
}

}  // namespace

double half_life_weight(std::int64_t ts, std::int64_t at, std::int64_t half_life) {
    require_positive(half_life, "half-life");
    if (ts > at) return 0;
    std::int64_t age;
    if (__builtin_sub_overflow(at, ts, &age)) return 0;  // older than any half-life can reach
    // Microsecond counts below 2^53 (285 years) are exact doubles; an age of exactly k
    // half-lives weighs exactly 2^−k.
    return std::exp2(-(static_cast<double>(age) / static_cast<double>(half_life)));
}

std::int64_t period_index(std::int64_t ts, std::int64_t at, std::int64_t period) {
    require_positive(period, "period");
    if (ts > at) return -1;
    std::int64_t age;
    if (__builtin_sub_overflow(at, ts, &age)) return std::numeric_limits<std::int64_t>::max();
    return age / period;  // age ≥ 0: truncation is the floor
}

void accumulate(HalfLifeState& state, std::int64_t ts, double amount, std::int64_t at, std::int64_t half_life) {
    require_amount(amount);
    const double weight = half_life_weight(ts, at, half_life);  // checks half_life
    if (state.rows > 0) {
        if (state.at != at) mismatch("instant \"at\"");
        if (state.half_life != half_life) mismatch("half-life");
    }
    state.at = at;
    state.half_life = half_life;
    state.rows += 1;
    if (ts <= at) {
        state.counted += 1;
        state.sum.add(amount * weight);
    }
}

void accumulate(IntervalState& state, std::int64_t ts, double amount, std::int64_t at, std::int64_t period,
                double decay, int depth) {
    require_amount(amount);
    require_decay(decay, depth);
    const std::int64_t i = period_index(ts, at, period);  // checks period
    if (state.rows > 0) {
        if (state.at != at) mismatch("instant \"at\"");
        if (state.period != period) mismatch("period");
        if (state.decay != decay) mismatch("decay factor");
        if (state.depth != depth) mismatch("depth");
    }
    state.at = at;
    state.period = period;
    state.decay = decay;
    state.depth = depth;
    state.rows += 1;
    if (i >= 0 && i < depth) {
        state.counted += 1;
        // i < depth ≤ INT32_MAX; pow(x, 0) = 1 even for x = 0.
        state.sum.add(amount * std::pow(decay, static_cast<int>(i)));
    }
}

namespace {

// Merges `other` into `state`: both states of one aggregate call, so the instant and the
// parameters (`check_parameters` throws on a mismatch) must agree.
template <typename State, typename CheckParameters>
void merge_states(State& state, const State& other, CheckParameters check_parameters) {
    if (other.rows == 0) return;
    if (state.rows == 0) {
        state = other;
        return;
    }
    if (state.at != other.at) mismatch("instant \"at\"");
    check_parameters();
    std::int64_t rows = state.rows, counted = state.counted;
    add_counts(rows, counted, other.rows, other.counted);
    state.sum.merge(other.sum);
    state.rows = rows;
    state.counted = counted;
}

}  // namespace

void merge(HalfLifeState& state, const HalfLifeState& other) {
    merge_states(state, other, [&] {
        if (state.half_life != other.half_life) mismatch("half-life");
    });
}

void merge(IntervalState& state, const IntervalState& other) {
    merge_states(state, other, [&] {
        if (state.period != other.period) mismatch("period");
        if (state.decay != other.decay) mismatch("decay factor");
        if (state.depth != other.depth) mismatch("depth");
    });
}

void validate(const HalfLifeState& s) {
    validate_counts(s.rows, s.counted);
    if (s.rows == 0) {
        if (s.counted != 0 || s.at != 0 || s.half_life != 0 || s.sum.sum != 0 || s.sum.compensation != 0) {
            corrupt("an empty state with data");
        }
        return;
    }
    if (s.half_life <= 0) corrupt("non-positive half-life");
    validate_sum(s.sum, s.counted);
}

void validate(const IntervalState& s) {
    validate_counts(s.rows, s.counted);
    if (s.reserved != 0) corrupt("reserved field set");
    if (s.rows == 0) {
        if (s.counted != 0 || s.at != 0 || s.period != 0 || s.decay != 0 || s.depth != 0 || s.sum.sum != 0 ||
            s.sum.compensation != 0) {
            corrupt("an empty state with data");
        }
        return;
    }
    if (s.period <= 0) corrupt("non-positive period");
    if (!(s.decay >= 0 && s.decay <= 1)) corrupt("decay factor out of range");
    if (s.depth < 1) corrupt("depth below 1");
    validate_sum(s.sum, s.counted);
}

double finish(const HalfLifeState& s) {
    if (s.rows == 0) throw Error(ErrorKind::invalid_argument, "decayed_usage needs at least one row");
    return s.sum.value();
}

double finish(const IntervalState& s) {
    if (s.rows == 0) throw Error(ErrorKind::invalid_argument, "decayed_usage needs at least one row");
    return s.sum.value();
}

double factor(double usage, double share) {
    if (!std::isfinite(usage) || usage < 0) {
        throw Error(ErrorKind::out_of_range, "fair share: usage must be a finite, non-negative number");
    }
    if (!std::isfinite(share) || share < 0) {
        throw Error(ErrorKind::out_of_range, "fair share: share must be a finite, non-negative number");
    }
    if (share == 0) return 0;
    return std::exp2(-(usage / share));  // usage / share may overflow to +inf: 2^−inf = 0
}

}  // namespace hpcacct::fairshare
