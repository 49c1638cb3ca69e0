// `memplan simulate`: lower a plan (from a file or a built-in policy) and simulate it on the
// trace's device, or on a what-if machine. Exit 0 when the plan fits, 1 when it does not (with the
// diagnosis), 2 for bad input. Output files are written only after the simulation succeeded.
#include <fmt/core.h>

#include "cli/commands.hpp"
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
  std::string memory;
  std::string link;
  std::string h2d;
  std::string d2h;
  std::string latency;
  std::string host_memory;
  bool json = false;
  std::string timeline;
  std::string memory_csv;
  std::string plan_out;
};

int simulate(const SimulateOptions& o) {
  const sim::Workload workload = sim::read_trace(o.trace);
  sim::MachineOverrides overrides;
  if (!o.memory.empty()) overrides.memory_bytes = sim::parse_bytes(o.memory, "--memory");
  if (!o.link.empty()) overrides.link = o.link;
  if (!o.h2d.empty()) overrides.h2d_bytes_per_s = sim::parse_bandwidth(o.h2d, "--h2d");
  if (!o.d2h.empty()) overrides.d2h_bytes_per_s = sim::parse_bandwidth(o.d2h, "--d2h");
  if (!o.latency.empty()) overrides.copy_latency_ns = sim::parse_duration(o.latency, "--latency");
  if (!o.host_memory.empty())
    overrides.host_memory_bytes = sim::parse_bytes(o.host_memory, "--host-memory");
  const sim::Machine machine = sim::make_machine(workload.device, overrides);

  sim::Plan plan;
  if (!o.plan.empty()) {
    plan = sim::read_plan(o.plan, workload);
  } else {
    auto basic = sim::basic_plan(o.policy, workload);
    if (!basic) {
      std::string names;
      for (auto n : sim::basic_plan_names())
        names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
      throw sim::InputError("--policy",
                            fmt::format("unknown policy '{}' (known: {})", o.policy, names));
    }
    plan = std::move(*basic);
    sim::validate_plan(plan, workload, o.policy);
  }
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

void add_simulate_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate", "Simulate one training iteration under a memory plan");
  cmd->add_option("TRACE", options->trace, "trace file (format v1, see traces/FORMAT.md)")
      ->required();
  auto* plan = cmd->add_option("--plan", options->plan, "plan file (JSON, see docs/simulator.md)");
  auto* policy = cmd->add_option("--policy", options->policy,
                                 "built-in plan: in-core, swap-all, recompute-all");
  plan->excludes(policy);
  policy->excludes(plan);
  cmd->add_option("--memory", options->memory,
                  "device memory capacity, e.g. 16GiB (default: the trace's)");
  cmd->add_option("--link", options->link, "link preset: pcie3, pcie4, pcie5, nvlink2, c2c");
  cmd->add_option("--h2d", options->h2d, "host-to-device bandwidth, e.g. 12.5GB/s");
  cmd->add_option("--d2h", options->d2h, "device-to-host bandwidth, e.g. 12.5GB/s");
  cmd->add_option("--latency", options->latency, "cost of issuing one copy, e.g. 10us");
  cmd->add_option("--host-memory", options->host_memory,
                  "pinned host memory for swapped maps (default: unlimited)");
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
