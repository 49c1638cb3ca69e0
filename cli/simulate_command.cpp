// `memplan simulate`: lower a plan (from a file or a built-in policy) and simulate it on the
// trace's device, or on a what-if machine; a job of several ranks (trace format v3) is simulated
// rank by rank together, each rank under the same plan flags. Exit 0 when the plan fits, 1 when it
// does not (with the diagnosis), 2 for bad input. Output files are written only when the plan fits
// (io/output_file).
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/input_limit_flags.hpp"
#include "cli/machine_flags.hpp"
#include "cli/plan_flags.hpp"
#include "core/input_error.hpp"
#include "io/job_report.hpp"
#include "io/memory_snapshot_export.hpp"
#include "io/output_file.hpp"
#include "io/plan_io.hpp"
#include "io/timeline_export.hpp"
#include "io/trace_io.hpp"
#include "sim/job_simulation.hpp"
#include "sim/simulation.hpp"

namespace memplan::cli {

namespace {
struct SimulateOptions {
  std::string trace;
  PlanFlags plan;
  MachineFlags machine;
  bool json = false;
  std::string timeline;
  std::string memory_csv;
  std::string plan_out;
  std::string snapshot_out;
};

/// A job of several ranks: each rank's machine and plan from the same flags, simulated together.
int simulate_job(const SimulateOptions& o, const sim::Job& job, std::FILE* report) {
  for (const auto& [path, flag] : {std::pair{o.memory_csv, "--memory-csv"},
                                   {o.plan_out, "--plan-out"},
                                   {o.snapshot_out, "--snapshot-out"}}) {
    if (!path.empty()) {
      throw sim::InputError(flag, fmt::format("{} holds a job of {} ranks, and {} writes one "
                                              "rank's; simulate a single rank's trace for it",
                                              o.trace, job.ranks.size(), flag));
    }
  }
  const std::vector<sim::Machine> machines = machines_from_flags(job, o.machine);
  const std::vector<sim::Plan> plans = plans_from_flags(job, machines, o.plan, "simulate");
  const sim::JobRun run = sim::simulate_job(job, plans, machines);
  const std::string policy = plans.front().policy.empty() ? o.plan.plan : plans.front().policy;
  if (o.json) {
    nlohmann::json j = sim::job_summary_json(run, job, machines);
    j["policy"] = policy;
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "{}", sim::job_summary_text(run, job, machines, policy));
  }
  if (!run.timeline.feasible) {
    if (!o.json)
      fmt::print(stderr, "memplan: the plan does not fit on every rank{}\n",
                 o.timeline.empty() ? "" : " (no output file written)");
    return 1;
  }
  sim::write_outputs(
      {{o.timeline, o.timeline.empty() ? "" : sim::job_chrome_trace_json(run, job)}});
  return 0;
}

int simulate(const SimulateOptions& o) {
  sim::check_outputs({{o.timeline, "--timeline"},
                      {o.memory_csv, "--memory-csv"},
                      {o.plan_out, "--plan-out"},
                      {o.snapshot_out, "--snapshot-out"}},
                     {{o.trace, "TRACE"}, {o.plan.plan, "--plan"}});
  std::FILE* report = sim::report_stream({o.timeline, o.memory_csv, o.plan_out, o.snapshot_out});
  sim::Job job = sim::read_job(o.trace);
  if (job.ranks.size() > 1) return simulate_job(o, job, report);
  const sim::Workload workload = std::move(job.ranks.front());
  const sim::Machine machine = machine_from_flags(workload, o.machine);
  const sim::Plan plan = plan_from_flags(workload, machine, o.plan, "simulate");
  const sim::Simulation simulation = sim::simulate_plan(workload, plan, machine);
  const sim::Program& program = simulation.program;
  const sim::Timeline& timeline = simulation.timeline;

  if (o.json) {
    nlohmann::json j = sim::summary_json(timeline, program, workload, machine);
    j["policy"] = plan.policy;
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "{}",
               sim::summary_text(timeline, program, workload, machine,
                                 plan.policy.empty() ? o.plan.plan : plan.policy));
  }
  if (!timeline.feasible) {
    const bool outputs = !o.timeline.empty() || !o.memory_csv.empty() || !o.plan_out.empty() ||
                         !o.snapshot_out.empty();
    if (!o.json)
      fmt::print(stderr, "memplan: the plan {}{}: {}\n",
                 timeline.saturated ? "has no time" : "does not fit",
                 outputs ? " (no output file written)" : "",
                 sim::why_not_text(timeline, program, workload));
    return 1;
  }
  const std::string timeline_json =
      o.timeline.empty() ? "" : sim::chrome_trace_json(timeline, program, workload);
  const std::string memory_csv = o.memory_csv.empty() ? "" : sim::memory_csv(timeline);
  const std::string plan_json = o.plan_out.empty() ? "" : sim::write_plan(plan, workload);
  const std::string snapshot =
      o.snapshot_out.empty() ? ""
                             : sim::memory_snapshot_pickle(timeline, program, workload, machine);
  sim::write_outputs({{o.timeline, timeline_json},
                      {o.memory_csv, memory_csv},
                      {o.plan_out, plan_json},
                      {o.snapshot_out, snapshot}});
  return 0;
}
}  // namespace

void add_simulate_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate", "Simulate one training iteration under a memory plan");
  add_input_limit_flags(*cmd);
  cmd->add_option("TRACE", options->trace,
                  "trace file (formats v1 to v3, see traces/FORMAT.md): one step, or a job's ranks")
      ->required();
  add_plan_flags(*cmd, options->plan);
  add_machine_flags(*cmd, options->machine);
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->add_option("--timeline", options->timeline,
                  "write a Chrome/Perfetto trace JSON of the run (- for standard output)");
  cmd->add_option("--memory-csv", options->memory_csv,
                  "write the device memory curve as CSV (- for standard output)");
  cmd->add_option("--plan-out", options->plan_out,
                  "write the plan that was simulated (- for standard output)");
  cmd->add_option("--snapshot-out", options->snapshot_out,
                  "write the device memory over the step as a PyTorch memory snapshot (a pickle "
                  "for pytorch.org/memory_viz)");
  cmd->callback([options, &exit_status] { exit_status = simulate(*options); });
}

}  // namespace memplan::cli
