#pragma once
// A memory snapshot's allocation requests replayed through memplan's model of PyTorch's caching
// allocator (memory/caching_allocator.hpp), to compare what the model reserves and hands out with
// what the real allocator did (issue 38): at the dump, and the peaks over the events.
//
// How: the model starts from the device as it was at the first event: the segments at the dump,
// less those the events cudaMalloc'ed and plus those they cudaFree'd, each at its address and of
// its stream and pool, and in them the blocks live then (allocated before the ring buffer's
// oldest entry: freed by an event with no `alloc` before it, or live at the dump with none) at
// their addresses. Then each `alloc` event allocates its size on its stream, each
// `free_completed` releases its block (the moment the real allocator could reuse it), and each
// `segment_free` (torch.cuda.empty_cache, or a cudaMalloc that failed) gives back the model's
// segment the same `segment_alloc` made. At each `oom` the model is asked whether it too fails the
// request with the free device memory the event records. The model follows the snapshot's
// max_split_size and roundup_power2_divisions. The device is as large as the model's address space
// (2^50 bytes): a snapshot records no capacity.
//
// Expandable segments: each pool's and stream's address space starts at the lowest address the
// dump or the events show for it, with the pages mapped at the first event (the dump's runs, less
// what the events mapped, plus what they unmapped); each `segment_unmap` unmaps the same pages
// where the model has them free.
//
// What the model does not do, each said in `differences` when the snapshot shows it: a
// garbage-collection threshold (c10 collects only under a memory fraction, which a snapshot does
// not record); blocks live before the first event in no segment of that time (an inconsistent
// snapshot) are placed by the model.
#include <cstdint>
#include <optional>
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
  std::size_t seeded_segments = 0;  // held at the first event, the model's start
  std::size_t seeded_blocks = 0;    // live before the first event, placed first
  std::size_t segments_kept = 0;    // segment_free events for a model segment still in use
  // At every event: each `alloc` placed at the address the real allocator gave it, and the
  // reserved bytes after each event equal to the snapshot's (its segment events' running total;
  // not checked right after a segment_alloc, whose segment the model makes at the next alloc).
  std::size_t allocations = 0;
  std::size_t placed_as_recorded = 0;
  std::optional<std::size_t> first_misplaced;          // index of the first alloc placed elsewhere
  std::optional<std::size_t> first_reserved_mismatch;  // ... of the first event after which the
                                                       // reserved bytes differ
  // Each `oom` event (c10 could not serve a request even after giving back its cached segments):
  // whether the model fails the same request with the device's free memory the event gives.
  std::size_t ooms = 0;
  std::size_t ooms_reproduced = 0;
  std::optional<std::size_t> first_oom_served;  // index of an oom the model would have served
  std::size_t failed_allocs = 0;                // requests the model could not serve
  std::vector<std::string> differences;  // what the model does not do that this snapshot shows
};

/// The replay of `history`'s device (snapshot_histories) through the caching-allocator model.
AllocatorReplay replay_allocator(const MemorySnapshot& snapshot, const SnapshotHistory& history);

}  // namespace memplan::importers
