// Equivalents and job charges (rules §0-§1).
#pragma once
#include "core/core_only.hpp"
#include "core/tres.hpp"

namespace hpcacct::charge {

// max over the bundle's components k of request_k / bundle_k. Throws if the bundle is empty.
double equivalents(const tres::View& request, const tres::View& bundle);

// Whole nodes an exclusive job holds: max(request.node, ceil(request_k / node_k)) over the
// node's components. Throws if the node capacity is empty.
double whole_nodes(const tres::View& request, const tres::View& node);

// Equivalents of an exclusive job: the request rounded up to whole nodes of `node`
// (component-wise max of the request and nodes x node), measured against the bundle.
double exclusive_equivalents(const tres::View& request, const tres::View& node, const tres::View& bundle);

// equivalents x hours x rate; `node` is null for shared node types.
// Throws on negative or non-finite hours or rate. Every function here throws
// Error(out_of_range) rather than return a result that overflows a double.
double job_charge(const tres::View& request, double hours, const tres::View& bundle, double rate,
                  const tres::View* node);

}  // namespace hpcacct::charge
