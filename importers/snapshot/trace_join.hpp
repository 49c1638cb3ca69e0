#pragma once
// A memory snapshot and a PyTorch profiler trace of the same run, joined by time (issue 38): each
// allocation of the snapshot attributed to the profiler's op that was running when it was made,
// so that a user sees which ops allocated what, in the snapshot's exact sizes.
//
// How: the snapshot's events carry `time_us`, microseconds since the Unix epoch; a Kineto trace's
// `ts` are microseconds since its `baseTimeNanoseconds` (traces without it, before PyTorch 2.2 or
// so, count from the epoch themselves). An allocation at time t goes to the innermost CPU op
// (`cat` cpu_op, a complete event) open at t: of the ops open then on any thread, the one that
// started last, and of those that started in the same microsecond the one that ends last (an op
// allocates its output before it calls the ops nested in it; the thread that allocates is the one
// that entered an op most recently: during backward the main thread waits inside `backward`
// while the autograd thread runs the ops). Only
// allocations within the trace's span count; one outside every op is not attributed. A snapshot
// whose events do not overlap the trace in time is from another run: InputError. c10 stamps its
// events with an approximate clock, about a microsecond off the profiler's; on the H200 traces
// every allocation still goes to the op the profiler's own `[memory]` events name
// (tests/importers/snapshot/trace_join_test.cpp).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "importers/snapshot/memory_snapshot.hpp"

namespace memplan::importers {

struct OpAllocations {
  std::string op;  // the profiler's name ("aten::empty_strided", "aten::mm")
  std::size_t allocations = 0;
  std::int64_t bytes = 0;  // the allocations' sizes as the snapshot gives them
};

struct SnapshotTraceJoin {
  std::int64_t device = 0;
  std::size_t in_span = 0;     // the device's `alloc` events within the trace's span
  std::size_t attributed = 0;  // of those, made inside an op
  std::int64_t attributed_bytes = 0;
  std::vector<OpAllocations> by_op;  // most bytes first
};

/// The join of `snapshot` with the Kineto trace at `trace` (gzip'd or not), per device that has
/// events. Throws InputError for a trace that cannot be read or that does not overlap the
/// snapshot in time.
std::vector<SnapshotTraceJoin> join_with_trace(const MemorySnapshot& snapshot,
                                               const std::filesystem::path& trace);

}  // namespace memplan::importers
