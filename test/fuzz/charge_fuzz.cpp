// Equivalents and job charges over parsed tres values (charge::*, behind hpcacct.equivalents
// and hpcacct.charge).
//
// Input: text "request|bundle|node|hours|rate"; each tres part goes through tres::parse, an empty
// node means a shared node type, hours and rate are read with strtod (so NaN, inf and negative
// numbers are tried too).
// Properties, for any values tres::parse accepts:
//  - equivalents, whole_nodes, exclusive_equivalents and job_charge either throw
//    hpcacct::Error or return a finite, non-negative number (a charge goes into the ledger);
//  - whole_nodes >= the request's node count and is a whole number;
//  - exclusive equivalents >= shared equivalents (rounding up to whole nodes never lowers a charge).
#include "fuzz_support.hpp"

#include "core/charge.hpp"

#include <cstdlib>
#include <optional>

namespace tres = hpcacct::tres;
namespace charge = hpcacct::charge;
using hpcacct::Error;

namespace {

std::string_view next_field(std::string_view& rest) {
    const std::size_t bar = rest.find('|');
    const std::string_view field = rest.substr(0, bar);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    return field;
}

double number(std::string_view text) {
    const std::string copy(text);
    return copy.empty() ? 1.0 : std::strtod(copy.c_str(), nullptr);
}

template <typename F>
std::optional<double> attempt(F&& f) {
    try {
        return f();
    } catch (const Error&) {
        return std::nullopt;
    }
}

bool good(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    const std::string_view input = rest;
    tres::Vector request_v, bundle_v, node_v;
    try {
        tres::parse(next_field(rest), request_v);
        tres::parse(next_field(rest), bundle_v);
        tres::parse(next_field(rest), node_v);
    } catch (const Error&) {
        return 0;
    }
    const double hours = number(next_field(rest));
    const double rate = number(next_field(rest));
    const std::vector<unsigned char> request_b = fuzz::packed(request_v), bundle_b = fuzz::packed(bundle_v),
                                     node_b = fuzz::packed(node_v);
    const tres::View request(request_b.data(), request_b.size()), bundle(bundle_b.data(), bundle_b.size()),
        node(node_b.data(), node_b.size());
    const std::string shown_text = fuzz::shown(input);
    const char* shown = shown_text.c_str();

    const std::optional<double> shared = attempt([&] { return charge::equivalents(request, bundle); });
    if (shared) FUZZ_CHECK(good(*shared), "equivalents = %g for \"%s\"", *shared, shown);

    const std::optional<double> nodes = attempt([&] { return charge::whole_nodes(request, node); });
    if (nodes) {
        FUZZ_CHECK(good(*nodes) && *nodes == std::floor(*nodes) && *nodes >= request.get("node"),
                   "whole_nodes = %g for \"%s\"", *nodes, shown);
    }

    const std::optional<double> exclusive =
        attempt([&] { return charge::exclusive_equivalents(request, node, bundle); });
    if (exclusive) {
        FUZZ_CHECK(good(*exclusive), "exclusive_equivalents = %g for \"%s\"", *exclusive, shown);
        FUZZ_CHECK(!shared || *exclusive >= *shared, "exclusive %g < shared %g equivalents for \"%s\"", *exclusive,
                   *shared, shown);
    }

    const std::optional<double> shared_charge =
        attempt([&] { return charge::job_charge(request, hours, bundle, rate, nullptr); });
    if (shared_charge) FUZZ_CHECK(good(*shared_charge), "charge = %g for \"%s\"", *shared_charge, shown);
    const std::optional<double> exclusive_charge =
        attempt([&] { return charge::job_charge(request, hours, bundle, rate, &node); });
    if (exclusive_charge) {
        FUZZ_CHECK(good(*exclusive_charge), "exclusive charge = %g for \"%s\"", *exclusive_charge, shown);
    }
    return 0;
}
