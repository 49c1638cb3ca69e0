#pragma once
// A plan named by a policy: every policy of search/ (its decision on this workload and machine),
// then the simulator's basic plans (swap-all, recompute-all), and `budget-partitioner=B` (PyTorch's
// memory-budget partitioner at activation_memory_budget B). What `--policy NAME` means on the
// command line and `policy=NAME` in the Python API, in one place.
#include <string>
#include <string_view>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"

namespace memplan::search {

/// The plan of the policy `name`, validated. Throws InputError naming `--policy` (and the known
/// names) for an unknown name.
sim::Plan named_plan(std::string_view name, const sim::Workload& workload,
                     const sim::Machine& machine);

/// Every name named_plan() knows, comma-separated: the policies, then the basic plans.
std::string named_plan_names();

}  // namespace memplan::search
