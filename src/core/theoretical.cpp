#include "core/theoretical.hpp"

#include "core/error.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace hpcacct::theoretical {
namespace {

void check_finite(double x, const char* what) {
    if (!std::isfinite(x))
        detail::not_finite(what);
}

}  // namespace

namespace detail {

void not_finite(const char* what) {
    throw Error(ErrorKind::out_of_range, std::string(what) + " must be a finite number");
}

void result_out_of_range() {
    throw Error(ErrorKind::out_of_range, "theoretical consumption is out of range");
}

void sum_out_of_range() {
    throw Error(ErrorKind::out_of_range, "sum is out of range");
}

}  // namespace detail

void Sum::merge(const Sum& other) {
    add(other.sum);
    add(other.compensation);
}

double Sum::value() const {
    const double total = sum + compensation;
    if (!std::isfinite(total))
        detail::sum_out_of_range();
    return total;
}

namespace {

std::string date_text(std::int32_t days) {
    const calendar::Civil c = calendar::civil_of_day(days);
    char text[16];
    std::snprintf(text, sizeof text, "%04d-%02d-%02d", static_cast<int>(c.year), static_cast<int>(c.month),
                  static_cast<int>(c.day));
    return text;
}

void require_same(const State& state, std::int32_t at, std::int32_t convention) {
    if (state.at != at) {
        throw Error(ErrorKind::invalid_argument, "every row of tmc or tc must name the same date \"at\"",
                    "Rows name both " + date_text(state.at) + " and " + date_text(at) + ".");
    }
    if (state.convention != convention) {
        throw Error(ErrorKind::invalid_argument, "every row of tmc or tc must name the same month convention",
                    "Rows name both \"half_month\" and \"day\".");
    }
}

[[noreturn]] void corrupt(const char* what) {
    throw Error(ErrorKind::internal, "corrupt theoretical consumption state", what);
}

}  // namespace

void accept_row(State& state, std::int32_t at, MonthConvention convention) {
    const std::int32_t code = 1 + static_cast<std::int32_t>(convention);
    if (state.convention == 0) {
        state.at = at;
        state.convention = code;
        return;
    }
    require_same(state, at, code);
}

void merge(State& state, const State& other) {
    if (other.convention == 0) return;
    if (state.convention == 0) {
        state = other;
        return;
    }
    require_same(state, other.at, other.convention);
    Sum merged = state.sum;
    merged.merge(other.sum);
    state.sum = merged;
}

void validate(const State& state) {
    if (!std::isfinite(state.sum.sum) || !std::isfinite(state.sum.compensation)) corrupt("non-finite sum");
    if (state.convention == 0) {
        if (state.at != 0 || state.sum.sum != 0 || state.sum.compensation != 0) corrupt("a sum without rows");
        return;
    }
    if (state.convention != 1 + static_cast<std::int32_t>(MonthConvention::half_month) &&
        state.convention != 1 + static_cast<std::int32_t>(MonthConvention::day)) {
        corrupt("unknown month convention");
    }
    if (state.at < calendar::kFirstDay || state.at > calendar::kLastDay) corrupt("date out of range");
}

RegulationStatus regulation_status(double consumption, double tc, double tmc) {
    check_finite(consumption, "consumption");
    check_finite(tc, "theoretical consumption");
    check_finite(tmc, "theoretical monthly consumption");
    if (!(tmc > 0))
        return RegulationStatus::ok;
    const double delta = consumption - tc;
    if (!std::isfinite(delta))
        throw Error(ErrorKind::out_of_range, "consumption minus theoretical consumption is out of range");
    if (delta > -tmc)
        return RegulationStatus::ok;
    if (delta > -2 * tmc)
        return RegulationStatus::warning;
    return RegulationStatus::retraction;
}

const char* to_string(RegulationStatus status) {
    switch (status) {
        case RegulationStatus::ok:
            return "ok";
        case RegulationStatus::warning:
            return "warning";
        case RegulationStatus::retraction:
            return "retraction";
    }
    return "ok";
}

}  // namespace hpcacct::theoretical
