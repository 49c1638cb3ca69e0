#include "search/policies/named_plan.hpp"

#include <exception>
#include <string>

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {

namespace {

constexpr std::string_view kPartitionerAt = "budget-partitioner=";

// "budget-partitioner=B": the partitioner at activation_memory_budget B, 0 to 1.
double partitioner_budget(std::string_view name) {
  const std::string text(name.substr(kPartitionerAt.size()));
  std::size_t used = 0;
  double budget = -1;
  try {
    budget = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !(budget >= 0 && budget <= 1)) {
    throw sim::InputError("--policy", fmt::format("'{}': budget-partitioner=B takes "
                                                  "activation_memory_budget B from 0 to 1",
                                                  name));
  }
  return budget;
}

}  // namespace

sim::Plan named_plan(std::string_view name, const sim::Workload& workload,
                     const sim::Machine& machine) {
  if (name.starts_with(kPartitionerAt)) {
    sim::Plan plan = partitioner_plan(NetworkView(workload), partitioner_budget(name));
    plan.policy = std::string(name);
    sim::validate_plan(plan, workload, name);
    return plan;
  }
  if (const Policy* policy = find_policy(name)) {
    Evaluator evaluator(workload, machine);
    sim::Plan plan = decide(*policy, evaluator, NetworkView(workload)).plan;
    sim::validate_plan(plan, workload, name);
    return plan;
  }
  if (auto basic = sim::basic_plan(name, workload)) {
    sim::validate_plan(*basic, workload, name);
    return std::move(*basic);
  }
  throw sim::InputError("--policy",
                        fmt::format("unknown policy '{}' (known: {}; and {}B, the memory-budget "
                                    "partitioner at activation_memory_budget B)",
                                    name, named_plan_names(), kPartitionerAt));
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
