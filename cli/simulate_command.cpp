// `memplan simulate`: lower a plan (from a file or a built-in policy) and simulate it on the
// trace's device, or on a what-if machine. Exit 0 when the plan fits, 1 when it does not (with the
// diagnosis), 2 for bad input. Output files are written only after the simulation succeeded.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/machine_flags.hpp"
#include "search/gist.hpp"
#include "search/policy.hpp"
#include "sim/basic_plans.hpp"
#include "sim/engine.hpp"
#include "sim/input_error.hpp"
#include "sim/lowering.hpp"
#include "sim/plan_io.hpp"
#include "sim/timeline_export.hpp"
#include "sim/trace_io.hpp"

namespace memplan::cli {

namespace {
struct SimulateOptions {
  std::string trace;
  std::string plan;
  std::string policy;
  std::string encode;
  MachineFlags machine;
  bool json = false;
  std::string timeline;
  std::string memory_csv;
  std::string plan_out;
};

int simulate(const SimulateOptions& o) {
  const sim::Workload workload = sim::read_trace(o.trace);
  const sim::Machine machine = machine_from_flags(workload, o.machine);
  const search::EncodingOptions encodings = search::parse_encoding_options(o.encode, "--encode");
  sim::Plan plan = o.plan.empty() ? plan_from_policy(o.policy, workload, machine)
                                  : sim::read_plan(o.plan, workload);
  plan = search::apply_encodings(plan, search::NetworkView(workload), encodings);
  const sim::Program program = sim::lower(workload, plan);
  sim::Engine engine;
  const sim::Timeline& timeline = engine.run(program, machine);

  if (!o.timeline.empty()) {
    sim::write_file_atomically(o.timeline, sim::chrome_trace_json(timeline, program, workload));
  }
  if (!o.memory_csv.empty()) sim::write_file_atomically(o.memory_csv, sim::memory_csv(timeline));
  if (!o.plan_out.empty()) sim::write_file_atomically(o.plan_out, sim::write_plan(plan, workload));

  if (o.json) {
    nlohmann::json j = sim::summary_json(timeline, program, workload, machine);
    j["policy"] = plan.policy;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", sim::summary_text(timeline, program, workload, machine,
                                       plan.policy.empty() ? o.plan : plan.policy));
  }
  if (!timeline.feasible) {
    if (!o.json)
      fmt::print(stderr, "memplan: the plan does not fit: {}\n",
                 sim::oom_to_text(*timeline.oom, program, workload));
    return 1;
  }
  return 0;
}
}  // namespace

// The policies of search/ first, then the simulator's own basic plans (swap-all, recompute-all).
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

void add_simulate_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate", "Simulate one training iteration under a memory plan");
  cmd->add_option("TRACE", options->trace, "trace file (format v1, see traces/FORMAT.md)")
      ->required();
  auto* plan = cmd->add_option("--plan", options->plan, "plan file (JSON, see docs/simulator.md)");
  auto* policy = cmd->add_option("--policy", options->policy,
                                 "a policy (see memplan compare) or swap-all, recompute-all");
  plan->excludes(policy);
  policy->excludes(plan);
  cmd->add_option("--encode", options->encode,
                  "Gist encodings for kept maps: binarize, sparse, dpr, fp16, fp10, fp8, all "
                  "(comma-separated)");
  add_machine_flags(*cmd, options->machine);
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->add_option("--timeline", options->timeline, "write a Chrome/Perfetto trace JSON of the run");
  cmd->add_option("--memory-csv", options->memory_csv, "write the device memory curve as CSV");
  cmd->add_option("--plan-out", options->plan_out, "write the plan that was simulated");
  cmd->callback([options, &exit_status] {
    if (options->plan.empty() && options->policy.empty()) {
      throw sim::InputError("simulate", "give --plan PLAN.json or --policy NAME");
    }
    exit_status = simulate(*options);
  });
}

}  // namespace memplan::cli
