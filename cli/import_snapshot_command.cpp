// `memplan import snapshot FILE`: a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot)
// read as data, never unpickled (importers/snapshot/pickle.hpp), and what it says of each device
// (importers/snapshot/snapshot_report.hpp).
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/input_limit_flags.hpp"
#include "importers/snapshot/snapshot_report.hpp"

namespace memplan::cli {

namespace {
struct SnapshotOptions {
  std::string file;
  std::string trace;
  bool json = false;
};
}  // namespace

void add_import_snapshot_command(CLI::App& import) {
  auto options = std::make_shared<SnapshotOptions>();
  auto* cmd = import.add_subcommand(
      "snapshot",
      "PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot, .pickle or .pickle.gz), "
      "read as data only: segments, allocator events, allocated and reserved bytes over them");
  add_input_limit_flags(*cmd);
  cmd->add_option("FILE", options->file, "memory snapshot")->required();
  cmd->add_option("--trace", options->trace,
                  "a PyTorch profiler trace of the same run: each allocation attributed to the op "
                  "running when it was made (joined by time)");
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->callback([options] {
    const importers::SnapshotReport report =
        importers::report_snapshot(options->file, options->trace);
    if (options->json) {
      fmt::print("{}\n", importers::snapshot_json(report).dump(2));
    } else {
      fmt::print("{}", importers::snapshot_text(report));
    }
  });
}

}  // namespace memplan::cli
