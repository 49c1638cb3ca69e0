// `memplan compare`: every published policy on the same trace and machine, side by side.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/machine_flags.hpp"
#include "cli/progress.hpp"
#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "search/studies/comparison.hpp"

namespace memplan::cli {

void add_compare_command(CLI::App& app) {
  struct Options {
    std::string trace;
    std::string encode;
    MachineFlags machine;
    bool json = false;
    bool csv = false;
    bool quiet = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd =
      app.add_subcommand("compare", "Run every memory policy on a trace and compare their plans");
  cmd->add_option("TRACE", options->trace, "trace file (format v1, see traces/FORMAT.md)")
      ->required();
  add_machine_flags(*cmd, options->machine);
  cmd->add_option("--encode", options->encode,
                  "Gist encodings for kept maps: binarize, sparse, dpr, fp16, fp10, fp8, all "
                  "(comma-separated)");
  auto* json = cmd->add_flag("--json", options->json, "print {\"rows\": [...]}");
  auto* csv = cmd->add_flag("--csv", options->csv, "print CSV, one line per policy (why_not last)");
  json->excludes(csv);
  add_quiet_flag(*cmd, options->quiet);
  cmd->callback([options] {
    const sim::Workload workload = sim::read_trace(options->trace);
    sim::require_sizes(workload, options->trace);
    const sim::Machine machine = machine_from_flags(workload, options->machine);
    const auto encodings = search::parse_encoding_options(options->encode, "--encode");
    // search::compare_policies reports no progress yet: the stage line says what the wait is for.
    Progress progress("compare", Progress::mode_for(options->quiet, options->json));
    progress.stage(fmt::format("running every policy on {} ops", workload.ops.size()));
    const search::Comparison comparison = search::compare_policies(workload, machine, encodings);
    progress.finish();
    if (options->json) {
      fmt::print("{}\n", search::comparison_json(comparison, workload, machine).dump(2));
    } else if (options->csv) {
      fmt::print("{}", search::comparison_csv(comparison, workload));
    } else {
      fmt::print("{}", search::comparison_text(comparison, workload, machine));
    }
  });
}

}  // namespace memplan::cli
