#include "cli/plan_flags.hpp"

#include "core/input_error.hpp"
#include "io/plan_io.hpp"
#include "search/policies/gist.hpp"
#include "search/policies/named_plan.hpp"

namespace memplan::cli {

void add_plan_flags(CLI::App& command, PlanFlags& flags) {
  auto* plan = command.add_option("--plan", flags.plan, "plan file (JSON, see docs/simulator.md)");
  auto* policy = command.add_option(
      "--policy", flags.policy,
      fmt::format(
          "a policy, one of: {} (memplan compare ranks them); or budget-partitioner=B, "
          "torch.compile's memory-budget partitioner at activation_memory_budget B (0 to 1)",
          search::named_plan_names()));
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
  const sim::Plan plan = flags.plan.empty() ? search::named_plan(flags.policy, workload, machine)
                                            : sim::read_plan(flags.plan, workload);
  return search::apply_encodings(plan, search::NetworkView(workload), encodings);
}

std::vector<sim::Plan> plans_from_flags(const sim::Job& job,
                                        const std::vector<sim::Machine>& machines,
                                        const PlanFlags& flags, std::string_view command) {
  if (flags.plan.empty()) {
    std::vector<sim::Plan> plans;
    for (std::size_t r = 0; r < job.ranks.size(); ++r) {
      plans.push_back(plan_from_flags(job.ranks[r], machines[r], flags, command));
    }
    return plans;
  }
  const search::EncodingOptions encodings =
      search::parse_encoding_options(flags.encode, "--encode");
  std::vector<sim::Plan> plans = sim::read_job_plans(flags.plan, job);
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    plans[r] = search::apply_encodings(plans[r], search::NetworkView(job.ranks[r]), encodings);
  }
  return plans;
}

}  // namespace memplan::cli
