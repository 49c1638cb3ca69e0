#pragma once
// Lowering: Plan -> Program (docs/simulator.md "Lowering"). One pass over the ops in issue order
// keeps, for every tensor, the device buffer that currently holds its contents; an op whose input
// is not resident gets it back first (prefetch wait, decode, or recompute of its producer,
// recursively). Frees are placed after the last compute instruction that references a buffer, so
// every buffer dies as early as the plan allows, and regenerated tensors live exactly as long as
// some later instruction needs them. The lowering is deterministic: same workload and plan, same
// Program.
#include "sim/plan.hpp"
#include "sim/program.hpp"
#include "sim/workload.hpp"

namespace memplan::sim {

/// Requires a validated workload and a plan that validate_plan accepts for it.
Program lower(const Workload& workload, const Plan& plan);

}  // namespace memplan::sim
