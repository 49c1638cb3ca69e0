#pragma once
// A device's allocations over a stretch of a run, in a profiler trace's time base: what gives a
// step recorded without shapes the sizes of its tensors (Note [Sizes from allocations] in
// importers/kineto/allocation_sizes.cpp). Two sources make one: the trace's own addressed
// `[memory]` events (importers/kineto/memory_timeline.hpp) and a CUDA memory snapshot of the same
// run (importers/snapshot/snapshot_allocations.hpp).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/units.hpp"

namespace memplan::importers {

struct Allocation {
  std::int64_t device_type = 0;  // 0 CPU, 1 CUDA
  std::int64_t addr = 0;
  sim::Bytes bytes = 0;
  std::optional<sim::Nanoseconds> alloc_ns;  // nullopt: allocated before the history starts
  std::optional<sim::Nanoseconds> free_ns;   // nullopt: still allocated when it ends
  std::string thread;  // where it was allocated (freed, if before the history); may be empty
  /// Freed where no event records it, by free_ns at the latest (Note [Frees the profiler does
  /// not see] in importers/kineto/memory_timeline.hpp).
  bool free_unrecorded = false;
};

struct AllocationHistory {
  std::vector<Allocation> allocations;  // in the order of their first event
  /// Bytes allocated before the history starts and not freed in it that no allocation above
  /// accounts for: memory held throughout (weights, optimizer state) that only a running total
  /// shows.
  sim::Bytes held_throughout = 0;
  std::string source;  // for the import's report: "the trace's [memory] events", "snapshot F"
};

}  // namespace memplan::importers
