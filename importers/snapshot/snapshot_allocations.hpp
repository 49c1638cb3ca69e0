#pragma once
// A memory snapshot's allocations on one device as an AllocationHistory in a profiler trace's
// time base: what gives a step recorded without shapes the sizes of its tensors when the run
// recorded its allocator history (torch.cuda.memory._record_memory_history) beside the profiler
// (Note [Sizes from allocations] in importers/kineto/allocation_sizes.cpp).
//
// How: an `alloc` event makes an allocation at its address, of the bytes it asked for (the
// block's before PyTorch 2.1); the next `free_requested` at that address, the program's free,
// ends it (`free_completed`, the block's return to the cache, can come later). A free of an
// address no event allocated frees memory allocated before the ring buffer's first event; a block
// allocated at the dump that no event allocated was held since before it. Times: `time_us` is
// microseconds since the Unix epoch, moved to the trace's time base by its baseTimeNanoseconds.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "importers/allocation_history.hpp"
#include "importers/snapshot/memory_snapshot.hpp"

namespace memplan::importers {

/// The allocations of `device` (nullopt: the one device that has events) in `snapshot`, at
/// trace times: `trace_zero_ns` is the Unix time of the trace's time 0. `source` names the
/// snapshot. Throws InputError when the device has no events or several devices do and none is
/// named, when an allocation has no time_us (PyTorch before 2.1), or when an address is
/// allocated twice without a free between.
AllocationHistory snapshot_allocation_history(const MemorySnapshot& snapshot,
                                              std::optional<std::int64_t> device,
                                              sim::Nanoseconds trace_zero_ns,
                                              const std::string& source);

/// snapshot_allocation_history of each file in `snapshots` (read_memory_snapshot), the i-th on
/// the clock of the trace whose time 0 is `trace_zero_ns[i]`: one per rank of a job, in rank
/// order; none for no file. Throws InputError ("--snapshot") when the counts differ,
/// ("--snapshot-device") for a device named without a snapshot, and as the two it calls.
std::vector<AllocationHistory> read_snapshot_allocation_histories(
    const std::vector<std::filesystem::path>& snapshots, std::optional<std::int64_t> device,
    const std::vector<sim::Nanoseconds>& trace_zero_ns);

}  // namespace memplan::importers
