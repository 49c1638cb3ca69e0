#pragma once
// What a memory snapshot says, as `memplan import snapshot` prints it and memplan.import_snapshot
// returns it: one report for the CLI and Python (docs/snapshots.md).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "importers/snapshot/memory_snapshot.hpp"

namespace memplan::importers {

/// What `memplan import snapshot FILE` prints: the allocator's settings and, per device
/// (snapshot_histories), the segments, the events and the bytes over them.
std::string snapshot_text(const std::string& file, const MemorySnapshot& snapshot,
                          const std::vector<SnapshotHistory>& histories);
/// The same as one JSON object (`memplan import snapshot --json`; memplan.import_snapshot):
/// `file`, `segments`, `devices` (one object per history, keys in docs/snapshots.md) and
/// `allocator_settings` (null when the snapshot has none).
nlohmann::json snapshot_json(const std::string& file, const MemorySnapshot& snapshot,
                             const std::vector<SnapshotHistory>& histories);

}  // namespace memplan::importers
