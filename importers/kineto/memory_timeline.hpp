#pragma once
// The caching allocator's allocations, paired from the `[memory]` events that carry an address
// (current Kineto format: `Addr`, `Bytes`, `Device Type`), the way PyTorch's memory timeline
// (torch.profiler._memory_profiler) identifies them: an allocation is a positive `Bytes` at an
// address, and it lives until the next negative `Bytes` at that address on the same device (the
// allocator may hand the address out again afterwards: that is another allocation). A free whose
// address holds no allocation seen in the trace frees memory allocated before the profiler
// started; an allocation never freed outlives the trace.
//
// What the importer does with them: it checks the forward ops' output shapes against the
// allocations each op made (ImportReport::outputs_confirmed).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "importers/allocation_history.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

/// The allocations of `events` (sorted by time) on `device_type`, in the order of their first
/// event; nullopt when none of that device's events carries an address (the 2021 format). A
/// second allocation at a live address, or a free of another size than the allocation it frees,
/// is a corrupt trace: InputError naming `source` and the time.
std::optional<std::vector<Allocation>> pair_allocations(const std::vector<MemoryEvent>& events,
                                                        std::int64_t device_type,
                                                        std::string_view source);

/// pair_allocations of the CUDA device with what was held throughout: the `Total Allocated` of
/// the first event less the event's own bytes, less what allocations freed in the trace held
/// then; nullopt as pair_allocations.
std::optional<AllocationHistory> trace_allocation_history(const KinetoTrace& trace);

/// The size the allocator reserves for a request of `bytes` on `device_type`: the CUDA caching
/// allocator rounds every request up to a multiple of 512 bytes (at least 512); the CPU
/// allocator records the request itself.
sim::Bytes allocator_bytes(sim::Bytes bytes, std::int64_t device_type);

}  // namespace memplan::importers
