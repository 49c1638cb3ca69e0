#include "search/policies/named_plan.hpp"

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {

sim::Plan named_plan(std::string_view name, const sim::Workload& workload,
                     const sim::Machine& machine) {
  if (const Policy* policy = find_policy(name)) {
    Evaluator evaluator(workload, machine);
    sim::Plan plan = policy->decide(evaluator, NetworkView(workload)).plan;
    sim::validate_plan(plan, workload, name);
    return plan;
  }
  if (auto basic = sim::basic_plan(name, workload)) {
    sim::validate_plan(*basic, workload, name);
    return std::move(*basic);
  }
  throw sim::InputError("--policy",
                        fmt::format("unknown policy '{}' (known: {})", name, named_plan_names()));
}

std::string named_plan_names() {
  std::string names;
  for (const auto& p : policies()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  for (auto n : sim::basic_plan_names()) {
    if (!find_policy(n)) names += fmt::format(", {}", n);
  }
  return names;
}

}  // namespace memplan::search
