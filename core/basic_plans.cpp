#include "core/basic_plans.hpp"

#include "core/feature_maps.hpp"
#include "core/fsdp_setting.hpp"

namespace memplan::sim {

Plan make_uniform_plan(const Workload& workload, Action action, std::string_view policy_name) {
  Plan plan;
  plan.policy = std::string(policy_name);
  plan.fingerprint = workload_fingerprint(workload);
  for (const FeatureMap& map : find_feature_maps(workload)) {
    plan.decisions.push_back(Decision{map.tensor, action, Encoding::kNone, kNoOp});
  }
  return plan;
}

Plan in_core_plan(const Workload& workload) {
  return make_uniform_plan(workload, Action::kKeep, "in-core");
}
Plan swap_all_plan(const Workload& workload) {
  return make_uniform_plan(workload, Action::kSwap, "swap-all");
}
Plan recompute_all_plan(const Workload& workload) {
  Plan plan = make_uniform_plan(workload, Action::kRecompute, "recompute-all");
  const std::vector<bool> regenerable = regenerable_tensors(workload);
  for (Decision& d : plan.decisions) {
    if (!regenerable[index(d.tensor)]) d.action = Action::kKeep;
  }
  return plan;
}

const std::vector<std::string_view>& basic_plan_names() {
  static const std::vector<std::string_view> names = {"in-core", "swap-all", "recompute-all"};
  return names;
}

std::optional<Plan> basic_plan(std::string_view name, const Workload& workload) {
  std::optional<Plan> plan;
  if (name == "in-core") plan = in_core_plan(workload);
  if (name == "swap-all") plan = swap_all_plan(workload);
  if (name == "recompute-all") plan = recompute_all_plan(workload);
  if (plan) apply_workload_fsdp_setting(*plan, workload);
  return plan;
}

}  // namespace memplan::sim
