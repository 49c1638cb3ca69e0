#include <fmt/core.h>

#include "cli/commands.hpp"
#include "io/trace_io.hpp"
#include "io/workload_summary.hpp"

namespace memplan::cli {

void add_info_command(CLI::App& app) {
  struct Options {
    std::string trace;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd =
      app.add_subcommand("info", "Summarise a trace: ops, tensors, feature maps, in-core peak");
  cmd->add_option("TRACE", options->trace, "trace file (format v1, see traces/FORMAT.md)")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->callback([options] {
    const sim::Workload workload = sim::read_trace(options->trace);
    const sim::WorkloadSummary summary = sim::summarize(workload);
    if (options->json) {
      fmt::print("{}\n", sim::to_json(summary, workload).dump(2));
    } else {
      fmt::print("{}", sim::to_text(summary, workload));
    }
  });
}

}  // namespace memplan::cli
