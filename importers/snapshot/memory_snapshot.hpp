#pragma once
// A PyTorch CUDA memory snapshot (torch.cuda.memory._snapshot(), written by _dump_snapshot and
// read by pytorch.org/memory_viz), read as data (importers/snapshot/pickle.hpp) and type-checked
// field by field: the caching allocator's segments and blocks at the dump, each device's ring
// buffer of allocator events, and the allocator's settings.
//
// What a snapshot says, in PyTorch's terms (c10/cuda/CUDACachingAllocator.cpp): `alloc` hands out
// a block (its rounded size counts in memory_allocated from then), `free_requested` is the
// program's free (it stops counting there), `free_completed` the block's return to the cache (later
// when other streams still use it); `segment_alloc` / `segment_free` (cudaMalloc / cudaFree) and
// `segment_map` / `segment_unmap` (expandable segments) change what is reserved. The ring buffer
// may have dropped its oldest events, so the figures at the first event are derived from the
// segments at the dump less what the events did (SnapshotHistory).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "importers/snapshot/pickle.hpp"

namespace memplan::importers {

struct SnapshotFrame {
  std::string name;
  std::string filename;
  std::int64_t line = 0;
};

struct SnapshotBlock {
  std::int64_t address = 0;  // given, or (older snapshots) the segment's plus the blocks before
  std::int64_t size = 0;
  std::int64_t requested_size = 0;
  std::string state;  // active_allocated, active_pending_free, inactive
};

struct SnapshotSegment {
  std::int64_t device = 0;
  std::int64_t address = 0;
  std::int64_t total_size = 0;
  std::int64_t allocated_size = 0;
  std::int64_t active_size = 0;
  std::int64_t stream = 0;
  std::string segment_type;  // large, small
  bool expandable = false;
  std::vector<SnapshotBlock> blocks;
};

struct SnapshotEvent {
  /// alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
  /// segment_unmap, oom, snapshot, annotate, or one a newer PyTorch added (kept, not replayed).
  std::string action;
  std::int64_t address = 0;  // absent for oom (0)
  std::int64_t size = 0;     // for oom, the request that failed
  std::int64_t stream = 0;
  std::optional<std::int64_t> device_free;  // oom: what cudaMemGetInfo said was free
  std::optional<double> time_us;            // absent before PyTorch 2.1
  std::vector<SnapshotFrame> frames;        // innermost first
};

struct AllocatorSettings {
  std::string alloc_conf;            // PYTORCH_CUDA_ALLOC_CONF as given
  std::int64_t max_split_size = -1;  // -1: none
  double garbage_collection_threshold = 0;
  bool expandable_segments = false;
  std::map<std::int64_t, std::int64_t> roundup_power2_divisions;  // size (MiB) -> divisions
};

struct MemorySnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<std::vector<SnapshotEvent>> device_traces;  // per device; empty: segments only
  std::optional<AllocatorSettings> settings;              // absent before PyTorch 2.4
};

/// The snapshot in FILE (a pickle, gzip-compressed or not). Throws InputError naming the file,
/// the field ("device_traces[0][12].size") and what is wrong.
MemorySnapshot read_memory_snapshot(const std::filesystem::path& path);
/// The same from a pickle's value; `source` names it in errors.
MemorySnapshot memory_snapshot_from(const PickleValue& root, const std::string& source);

/// One device's figures at the dump and over its events.
struct SnapshotHistory {
  std::int64_t device = 0;
  std::size_t segments = 0;
  std::int64_t largest_segment = 0;
  std::int64_t reserved_at_end = 0;   // the device's segments' total sizes
  std::int64_t allocated_at_end = 0;  // the active_allocated blocks' sizes (memory_allocated)
  std::int64_t requested_at_end = 0;  // what those blocks' allocations asked for
  std::size_t events = 0;
  std::map<std::string, std::size_t> actions;  // events per action
  // An `alloc` event gives the bytes asked for (PyTorch 2.1 on) or the block's (before): which,
  // is read from the live blocks at the dump whose allocation is among the events. The live
  // bytes over the events are in that unit, from the dump's figure less the events' net.
  bool events_give_requests = true;
  std::int64_t live_at_first_event = 0;
  std::int64_t peak_live = 0;
  std::size_t peak_live_event = 0;  // index of the event that reached it
  std::int64_t reserved_at_first_event = 0;
  std::int64_t peak_reserved = 0;
  std::optional<double> first_us, last_us;
};
/// Per device that has segments or events, in device order.
std::vector<SnapshotHistory> snapshot_histories(const MemorySnapshot& snapshot);

}  // namespace memplan::importers
