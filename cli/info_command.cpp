#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/input_limit_flags.hpp"
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
  add_input_limit_flags(*cmd);
  cmd->add_option("TRACE", options->trace,
                  "trace file (formats v1 to v3, see traces/FORMAT.md): one step, or a job's ranks")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object (a job: {\"ranks\": [...]})");
  cmd->callback([options] {
    const sim::Job job = sim::read_job(options->trace);
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const sim::Workload& workload : job.ranks) {
      const sim::WorkloadSummary summary = sim::summarize(workload);
      if (options->json) {
        ranks.push_back(sim::to_json(summary, workload));
      } else {
        if (job.ranks.size() > 1) fmt::print("== rank {}\n", workload.distributed->rank);
        fmt::print("{}", sim::to_text(summary, workload));
      }
    }
    if (!options->json) return;
    fmt::print("{}\n", job.ranks.size() == 1 ? ranks.front().dump(2)
                                             : nlohmann::ordered_json{{"ranks", ranks}}.dump(2));
  });
}

}  // namespace memplan::cli
