#pragma once
// What a memory snapshot says, as `memplan import snapshot` prints it and memplan.import_snapshot
// returns it: one report for the CLI and Python (docs/snapshots.md).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "importers/snapshot/allocator_replay.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/trace_join.hpp"

namespace memplan::importers {

/// A snapshot with what it says of each device and the caching-allocator model's replay of it.
struct SnapshotReport {
  std::string file;
  MemorySnapshot snapshot;
  std::vector<SnapshotHistory> histories;  // snapshot_histories
  std::vector<AllocatorReplay> replays;    // replay_allocator, one per history
  std::string trace;                       // a profiler trace of the same run, when given
  std::vector<SnapshotTraceJoin> joins;    // join_with_trace, per device with events
};
/// Reads FILE (read_memory_snapshot) and makes its report; with `trace` (a Kineto trace of the
/// same run), joins them by time. Throws InputError.
SnapshotReport report_snapshot(const std::filesystem::path& path,
                               const std::filesystem::path& trace = {});

/// What `memplan import snapshot FILE` prints: the allocator's settings and, per device, the
/// segments, the events, the bytes over them, and the model's replay against them.
std::string snapshot_text(const SnapshotReport& report);
/// The same as one JSON object (`memplan import snapshot --json`; memplan.import_snapshot):
/// `file`, `segments`, `devices` (one object per device, keys in docs/snapshots.md) and
/// `allocator_settings` (null when the snapshot has none).
nlohmann::json snapshot_json(const SnapshotReport& report);

}  // namespace memplan::importers
