#pragma once
// The caching allocator's allocations, paired from the `[memory]` events that carry an address
// (current Kineto format: `Addr`, `Bytes`, `Device Type`), the way PyTorch's memory timeline
// (torch.profiler._memory_profiler) identifies them: an allocation is a positive `Bytes` at an
// address, and it lives until the next negative `Bytes` at that address on the same device (the
// allocator may hand the address out again afterwards: that is another allocation). A free whose
// address holds no allocation seen in the trace frees memory allocated before the profiler
// started; an allocation never freed outlives the trace.
//
// Note [Frees the profiler does not see]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An allocator reports to the profiler only on a thread the profiler watches
// (c10::memoryProfilingEnabled is thread-local): a tensor whose last reference a thread of its
// own drops — gloo's worker finishing a collective after the training thread let go of the
// buffer, a Python thread — is freed with no event. The address is then handed out again while
// the trace still holds it allocated, or freed as another size (what was there was freed and
// allocated unseen). Either closes the earlier allocation, as freed without an event by then at
// the latest (`free_unrecorded`). The CPU allocator's reporter (ProfiledCPUMemoryReporter) also
// subtracts only the frees it reports: from such a free on, its `Total Allocated` counts the
// bytes still (RecordedStep). The CUDA caching allocator's `Total Allocated` is its own count of
// every thread's blocks: an unrecorded free shows as the first event whose total is that much
// below the events' sum, and the oldest allocation of that size the trace still holds (or holds
// until its address is reused) is freed there. On the CPU an unrecorded free whose address is not
// reused is not seen at all: the allocation outlives the trace, in the import and in the CPU's
// total alike.
//
// What the importer does with them: it checks the forward ops' output shapes against the
// allocations each op made (ImportReport::outputs_confirmed), and FSDP's buffers are tensors of
// their sizes and lifetimes (Note [FSDP in a trace]).
#include <cstdint>
#include <optional>
#include <vector>

#include "importers/allocation_history.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

/// The allocations of `events` (sorted by time) on `device_type`, in the order of their first
/// event; nullopt when none of that device's events carries an address (the 2021 format).
std::optional<std::vector<Allocation>> pair_allocations(const std::vector<MemoryEvent>& events,
                                                        std::int64_t device_type);

/// pair_allocations of the CUDA device with what was held throughout: the `Total Allocated` of
/// the first event less the event's own bytes, less what allocations freed in the trace held
/// then; nullopt as pair_allocations.
std::optional<AllocationHistory> trace_allocation_history(const KinetoTrace& trace);

/// The size the allocator reserves for a request of `bytes` on `device_type`: the CUDA caching
/// allocator rounds every request up to a multiple of 512 bytes (at least 512); the CPU
/// allocator records the request itself.
sim::Bytes allocator_bytes(sim::Bytes bytes, std::int64_t device_type);

}  // namespace memplan::importers
