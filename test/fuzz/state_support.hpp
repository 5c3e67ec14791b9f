// Shared by the aggregate-state targets: the glue's deserialize functions trust validate(), so
// a state validate() accepts must be safe to merge and finish, and every state
// accumulate/merge build must pass validate().
#pragma once

#include "fuzz_support.hpp"

#include "core/theoretical.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace fuzz {

// A State read byte for byte, as a deserialize function fills one.
template <typename State>
State read_state(Reader& in) {
    return in.take<State>();
}

template <typename State>
bool same_bytes(const State& a, const State& b) {
    return std::memcmp(&a, &b, sizeof(State)) == 0;
}

template <typename F>
auto attempt(F&& f) -> std::optional<decltype(f())> {
    try {
        return f();
    } catch (const hpcacct::Error&) {
        return std::nullopt;
    }
}

template <typename F>
std::optional<hpcacct::ErrorKind> error_of(F&& f) {
    try {
        f();
        return std::nullopt;
    } catch (const hpcacct::Error& e) {
        return e.kind();
    }
}

template <typename F>
bool succeeds(F&& f) {
    try {
        f();
        return true;
    } catch (const hpcacct::Error&) {
        return false;
    }
}

// validate/merge properties for two states read from the input:
//  - merge(a, b) of two valid states, when it succeeds, is valid;
//  - merge(a, b) and merge(b, a) fail alike (but for an overflow, which may depend on the
//    order) and otherwise give equivalent states (`same`: parallel plans combine partial
//    states in any order); an empty state is the identity, so this is only asked of two
//    non-empty states;
//  - finish is called on every valid state (Check checks its result).
template <typename State, typename Validate, typename Merge, typename Same, typename Check>
void check_states(const State& a, const State& b, Validate validate, Merge merge, Same same, Check check) {
    const bool a_ok = succeeds([&] { validate(a); });
    const bool b_ok = succeeds([&] { validate(b); });
    if (a_ok) check(a);
    if (b_ok) check(b);
    if (!a_ok || !b_ok) return;
    State ab = a, ba = b;
    const auto ab_error = error_of([&] { merge(ab, b); });
    const auto ba_error = error_of([&] { merge(ba, a); });
    // Whether a sum overflows (out_of_range) may depend on the order; nothing else may.
    if (ab_error != hpcacct::ErrorKind::out_of_range && ba_error != hpcacct::ErrorKind::out_of_range) {
        FUZZ_CHECK(ab_error == ba_error, "merge(a, b) and merge(b, a) disagree (error kinds %d and %d)",
                   ab_error ? static_cast<int>(*ab_error) : -1, ba_error ? static_cast<int>(*ba_error) : -1);
    }
    if (!ab_error) FUZZ_CHECK(succeeds([&] { validate(ab); }), "validate refuses the merge of two valid states");
    if (!ba_error) FUZZ_CHECK(succeeds([&] { validate(ba); }), "validate refuses the merge of two valid states");
    if (!ab_error && !ba_error && a.rows != 0 && b.rows != 0) {
        FUZZ_CHECK(same(ab, ba), "merge(a, b) and merge(b, a) differ");
    }
    if (!ab_error) check(ab);
}

// Two compensated sums of the same terms, added in another order: their values agree up to
// rounding relative to the magnitudes involved (their terms may cancel), or both overflow.
inline bool close_sums(const hpcacct::theoretical::Sum& x, const hpcacct::theoretical::Sum& y) {
    const auto vx = attempt([&] { return x.value(); });
    const auto vy = attempt([&] { return y.value(); });
    if (!vx || !vy) return vx.has_value() == vy.has_value();
    const double scale = std::fabs(x.sum) + std::fabs(x.compensation) + std::fabs(y.sum) + std::fabs(y.compensation);
    return std::fabs(*vx - *vy) <= 1e-12 * scale;
}

// Relative closeness, for sums added in a different order.
inline bool close(double a, double b) {
    return a == b || std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

// A state that accumulate refused must be unchanged, and one it accepted must validate.
template <typename State, typename Validate, typename Accumulate>
bool accumulate_checked(State& state, Validate validate, Accumulate accumulate) {
    const State before = state;
    if (!succeeds([&] { accumulate(state); })) {
        FUZZ_CHECK(same_bytes(state, before), "a refused row changed the state");
        return false;
    }
    FUZZ_CHECK(succeeds([&] { validate(state); }), "validate refuses a state accumulate built");
    return true;
}

}  // namespace fuzz
