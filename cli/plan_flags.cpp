#include "cli/plan_flags.hpp"

#include <fmt/core.h>

#include "search/gist.hpp"
#include "search/policy.hpp"
#include "sim/basic_plans.hpp"
#include "sim/input_error.hpp"
#include "sim/plan_io.hpp"

namespace memplan::cli {
namespace {

sim::Plan plan_from_policy(const std::string& name, const sim::Workload& workload,
                           const sim::Machine& machine) {
  if (const search::Policy* policy = search::find_policy(name)) {
    search::Evaluator evaluator(workload, machine);
    sim::Plan plan = policy->decide(evaluator, search::NetworkView(workload)).plan;
    sim::validate_plan(plan, workload, name);
    return plan;
  }
  if (auto basic = sim::basic_plan(name, workload)) {
    sim::validate_plan(*basic, workload, name);
    return std::move(*basic);
  }
  std::string names;
  for (const auto& p : search::policies())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  for (auto n : sim::basic_plan_names()) {
    if (!search::find_policy(n)) names += fmt::format(", {}", n);
  }
  throw sim::InputError("--policy", fmt::format("unknown policy '{}' (known: {})", name, names));
}

}  // namespace

void add_plan_flags(CLI::App& command, PlanFlags& flags) {
  auto* plan = command.add_option("--plan", flags.plan, "plan file (JSON, see docs/simulator.md)");
  auto* policy = command.add_option("--policy", flags.policy,
                                    "a policy (see memplan compare) or swap-all, recompute-all");
  plan->excludes(policy);
  policy->excludes(plan);
  command.add_option("--encode", flags.encode,
                     "Gist encodings for kept maps: binarize, sparse, dpr, fp16, fp10, fp8, all "
                     "(comma-separated)");
}

sim::Plan plan_from_flags(const sim::Workload& workload, const sim::Machine& machine,
                          const PlanFlags& flags, std::string_view command) {
  if (flags.plan.empty() && flags.policy.empty()) {
    throw sim::InputError(std::string(command), "give --plan PLAN.json or --policy NAME");
  }
  const search::EncodingOptions encodings =
      search::parse_encoding_options(flags.encode, "--encode");
  const sim::Plan plan = flags.plan.empty() ? plan_from_policy(flags.policy, workload, machine)
                                            : sim::read_plan(flags.plan, workload);
  return search::apply_encodings(plan, search::NetworkView(workload), encodings);
}

}  // namespace memplan::cli
