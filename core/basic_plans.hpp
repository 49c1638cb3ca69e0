#pragma once
// The three plans every simulator needs before any policy exists: keep everything (the in-core
// baseline), swap every feature map (default prefetch points), recompute every feature map that
// can be recomputed and keep the rest (regenerated tensors are memoised until their last backward
// use). Policy families proper live in
// search/; these stay here so the simulator can be exercised and tested on its own.
#include <optional>
#include <string_view>
#include <vector>

#include "core/plan.hpp"

namespace memplan::sim {

Plan make_uniform_plan(const Workload& workload, Action action, std::string_view policy_name);
Plan in_core_plan(const Workload& workload);
Plan swap_all_plan(const Workload& workload);
Plan recompute_all_plan(const Workload& workload);

/// "in-core", "swap-all", "recompute-all".
const std::vector<std::string_view>& basic_plan_names();
/// The plan of that name, or nullopt when there is none; on a workload that records FSDP's setting,
/// its gathered parameters decided by it (Note [FSDP's setting in a plan] in
/// core/fsdp_setting.hpp).
std::optional<Plan> basic_plan(std::string_view name, const Workload& workload);

}  // namespace memplan::sim
