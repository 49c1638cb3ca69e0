#pragma once
// A memory snapshot's allocation requests replayed through memplan's model of PyTorch's caching
// allocator (memory/caching_allocator.hpp), to compare what the model reserves and hands out with
// what the real allocator did (issue 38): at the dump, and the peaks over the events.
//
// How: the blocks live before the first event (allocated before the ring buffer's oldest entry:
// freed by an event with no `alloc` before it, or live at the dump with none) are allocated first,
// in address order; then each `alloc` event allocates its size and each `free_completed` releases
// its block (the moment the real allocator could reuse it). The device is as large as the model's
// address space (2^50 bytes): a snapshot records no capacity, and the real allocator gives back
// cached segments only when cudaMalloc fails, which an `oom` event says.
//
// What the model does not do, each said in `differences` when the snapshot shows it: several
// streams (PyTorch keeps a stream's blocks for that stream), max_split_size, expandable segments,
// roundup_power2_divisions, a garbage-collection threshold, segments given back by the program
// (torch.cuda.empty_cache: `segment_free` events), cached free segments reserved before the first
// event (the model starts with only the live blocks' segments).
#include <cstdint>
#include <string>
#include <vector>

#include "importers/snapshot/memory_snapshot.hpp"

namespace memplan::importers {

struct AllocatorReplay {
  std::int64_t device = 0;
  std::int64_t reserved_at_end = 0;   // the model's, after the last event
  std::int64_t allocated_at_end = 0;  // the model's blocks handed out (rounded sizes)
  std::int64_t peak_reserved = 0;
  std::int64_t peak_allocated = 0;
  std::size_t segments_at_end = 0;
  std::size_t seeded_blocks = 0;         // live before the first event, allocated first
  std::size_t failed_allocs = 0;         // requests the model could not serve
  std::vector<std::string> differences;  // what the model does not do that this snapshot shows
};

/// The replay of `history`'s device (snapshot_histories) through the caching-allocator model.
AllocatorReplay replay_allocator(const MemorySnapshot& snapshot, const SnapshotHistory& history);

}  // namespace memplan::importers
