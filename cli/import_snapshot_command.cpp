// `memplan import snapshot FILE`: a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot)
// read as data, never unpickled (importers/snapshot/pickle.hpp), and what it says of each device
// (importers/snapshot/snapshot_report.hpp).
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/snapshot_report.hpp"

namespace memplan::cli {

namespace {
struct SnapshotOptions {
  std::string file;
  bool json = false;
};
}  // namespace

void add_import_snapshot_command(CLI::App& import) {
  auto options = std::make_shared<SnapshotOptions>();
  auto* cmd = import.add_subcommand(
      "snapshot",
      "PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot, .pickle or .pickle.gz), "
      "read as data only: segments, allocator events, allocated and reserved bytes over them");
  cmd->add_option("FILE", options->file, "memory snapshot")->required();
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->callback([options] {
    const importers::MemorySnapshot snapshot = importers::read_memory_snapshot(options->file);
    const std::vector<importers::SnapshotHistory> histories =
        importers::snapshot_histories(snapshot);
    if (options->json) {
      fmt::print("{}\n", importers::snapshot_json(options->file, snapshot, histories).dump(2));
    } else {
      fmt::print("{}", importers::snapshot_text(options->file, snapshot, histories));
    }
  });
}

}  // namespace memplan::cli
