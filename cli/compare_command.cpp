// `memplan compare`: every published policy on the same trace and machine, side by side; for a
// job of several ranks (trace format v3), every policy on every rank, the ranks simulated
// together (search/studies/job_comparison.hpp).
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/input_limit_flags.hpp"
#include "cli/machine_flags.hpp"
#include "cli/progress.hpp"
#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "search/studies/comparison.hpp"
#include "search/studies/job_comparison.hpp"

namespace memplan::cli {

namespace {

struct CompareOptions {
  std::string trace;
  std::string encode;
  MachineFlags machine;
  bool json = false;
  bool csv = false;
  bool quiet = false;
};

// A job of several ranks: each rank's machine from the same flags.
void compare_job(const CompareOptions& o, const sim::Job& job) {
  sim::require_sizes(job, o.trace);
  const std::vector<sim::Machine> machines = machines_from_flags(job, o.machine);
  const auto encodings = search::parse_encoding_options(o.encode, "--encode");
  Progress progress("compare", Progress::mode_for(o.quiet, o.json));
  progress.stage(fmt::format("running every policy on {} ranks", job.ranks.size()));
  search::ComparisonOptions options;
  options.encodings = encodings;
  const search::JobComparison comparison = search::compare_job_policies(job, machines, options);
  progress.finish();
  if (o.json) {
    fmt::print("{}\n", search::job_comparison_json(comparison, job, machines).dump(2));
  } else if (o.csv) {
    fmt::print("{}", search::job_comparison_csv(comparison, job));
  } else {
    fmt::print("{}", search::job_comparison_text(comparison, job, machines));
  }
}

void compare(const CompareOptions& o) {
  sim::Job job = sim::read_job(o.trace);
  if (job.ranks.size() > 1) {
    compare_job(o, job);
    return;
  }
  const sim::Workload workload = std::move(job.ranks.front());
  sim::require_sizes(workload, o.trace);
  const sim::Machine machine = machine_from_flags(workload, o.machine);
  const auto encodings = search::parse_encoding_options(o.encode, "--encode");
  // search::compare_policies reports no progress yet: the stage line says what the wait is for.
  Progress progress("compare", Progress::mode_for(o.quiet, o.json));
  progress.stage(fmt::format("running every policy on {} ops", workload.ops.size()));
  const search::Comparison comparison = search::compare_policies(workload, machine, encodings);
  progress.finish();
  if (o.json) {
    fmt::print("{}\n", search::comparison_json(comparison, workload, machine).dump(2));
  } else if (o.csv) {
    fmt::print("{}", search::comparison_csv(comparison, workload));
  } else {
    fmt::print("{}", search::comparison_text(comparison, workload, machine));
  }
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto options = std::make_shared<CompareOptions>();
  auto* cmd =
      app.add_subcommand("compare", "Run every memory policy on a trace and compare their plans");
  add_input_limit_flags(*cmd);
  cmd->add_option("TRACE", options->trace,
                  "trace file (formats v1 to v3, see traces/FORMAT.md): one step, or a job's ranks")
      ->required();
  add_machine_flags(*cmd, options->machine);
  cmd->add_option("--encode", options->encode,
                  "Gist encodings for kept maps: binarize, sparse, dpr, fp16, fp10, fp8, all "
                  "(comma-separated)");
  auto* json = cmd->add_flag("--json", options->json, "print {\"rows\": [...]}");
  auto* csv = cmd->add_flag("--csv", options->csv,
                            "print CSV, one line per policy (per policy and rank for a job; "
                            "why_not last)");
  json->excludes(csv);
  add_quiet_flag(*cmd, options->quiet);
  cmd->callback([options] { compare(*options); });
}

}  // namespace memplan::cli
