#include "core/charge.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace hpcacct::charge {
namespace {

// A ratio within this relative distance of an integer counts as that integer, so that
// 48 cores on 24-core nodes are 2 nodes even after rounding in the inputs.
constexpr double kWholeTolerance = 1e-9;

void require_nonempty(const tres::View& v, const char* what, const char* why) {
    if (v.empty()) throw Error(ErrorKind::invalid_argument, std::string(what) + " must not be empty", why);
}

void require_finite_nonnegative(double value, const char* what) {
    if (!std::isfinite(value) || value < 0) {
        throw Error(ErrorKind::out_of_range, std::string(what) + " must be a finite, non-negative number");
    }
}

// A ratio of tiny and huge components (or huge hours and rate) can overflow a double; a
// charge goes into the ledger, so it is refused rather than returned as infinity.
double finite_result(double value, const char* what) {
    if (!std::isfinite(value)) throw Error(ErrorKind::out_of_range, std::string(what) + " is out of range");
    return value;
}

}  // namespace

double equivalents(const tres::View& request, const tres::View& bundle) {
    require_nonempty(bundle, "bundle", "An empty bundle defines no equivalent.");
    double result = 0;
    // Both are sorted by key: one merge pass.
    tres::View::Cursor b = bundle.cursor();
    tres::View::Cursor r = request.cursor();
    bool more_r = r.next();
    while (b.next()) {
        while (more_r && r.key() < b.key()) more_r = r.next();
        if (more_r && r.key() == b.key()) result = std::max(result, r.value() / b.value());
    }
    return finite_result(result, "equivalents");
}

double whole_nodes(const tres::View& request, const tres::View& node) {
    require_nonempty(node, "node capacity", "Whole nodes of an exclusive node type are counted against its capacity.");
    // The node count as given, rounded up (node=.1 still holds one node); no tolerance: it is
    // not a quotient, and a tolerance would round a count of 2^53 below itself.
    double nodes = std::ceil(request.get("node"));
    tres::View::Cursor n = node.cursor();
    while (n.next()) {
        const double ratio = request.get(n.key()) / n.value();
        nodes = std::max(nodes, std::ceil(ratio * (1 - kWholeTolerance)));
    }
    return finite_result(nodes, "whole nodes");
}

double exclusive_equivalents(const tres::View& request, const tres::View& node, const tres::View& bundle) {
    require_nonempty(bundle, "bundle", "An empty bundle defines no equivalent.");
    const double nodes = whole_nodes(request, node);
    double result = 0;
    tres::View::Cursor b = bundle.cursor();
    while (b.next()) {
        const double held = std::max(request.get(b.key()), nodes * node.get(b.key()));
        result = std::max(result, held / b.value());
    }
    return finite_result(result, "equivalents");
}

double job_charge(const tres::View& request, double hours, const tres::View& bundle, double rate,
                  const tres::View* node) {
    require_finite_nonnegative(hours, "elapsed time");
    require_finite_nonnegative(rate, "rate");
    const double eq = node != nullptr ? exclusive_equivalents(request, *node, bundle) : equivalents(request, bundle);
    return finite_result(eq * hours * rate, "charge");
}

}  // namespace hpcacct::charge
