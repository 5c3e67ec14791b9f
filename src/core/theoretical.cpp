#include "core/theoretical.hpp"

#include "core/error.hpp"

#include <cmath>
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
