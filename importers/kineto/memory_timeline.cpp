#include "importers/kineto/memory_timeline.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace memplan::importers {

namespace {

void close_unrecorded(Allocation& a, sim::Nanoseconds by) {
  a.free_ns = by;
  a.free_unrecorded = true;
}

}  // namespace

std::optional<std::vector<Allocation>> pair_allocations(const std::vector<MemoryEvent>& events,
                                                        std::int64_t device_type) {
  std::vector<Allocation> out;
  std::map<std::int64_t, std::size_t> live;  // address -> index in out
  bool addressed = false;
  for (const MemoryEvent& m : events) {
    if (m.device_type != device_type || !m.addr || m.bytes == 0) continue;
    addressed = true;
    const auto it = live.find(*m.addr);
    if (m.bytes > 0) {
      // Its earlier allocation was freed where no event records it (Note [Frees the profiler
      // does not see]): then, at the latest.
      if (it != live.end()) close_unrecorded(out[it->second], m.time_ns);
      live.insert_or_assign(*m.addr, out.size());
      out.push_back({device_type, *m.addr, m.bytes, m.time_ns, std::nullopt, m.thread});
      continue;
    }
    if (it != live.end() && out[it->second].bytes != -m.bytes) {
      // Another size than the allocation it frees: that one was freed and this one allocated
      // unseen.
      close_unrecorded(out[it->second], m.time_ns);
      live.erase(it);
    } else if (it != live.end()) {
      out[it->second].free_ns = m.time_ns;
      live.erase(it);
      continue;
    }
    // Allocated before the trace started, or unseen.
    out.push_back({device_type, *m.addr, -m.bytes, std::nullopt, m.time_ns, m.thread});
  }
  if (!addressed) return std::nullopt;
  return out;
}

std::optional<AllocationHistory> trace_allocation_history(const KinetoTrace& trace) {
  constexpr std::int64_t kCuda = 1;
  auto allocations = pair_allocations(trace.memory_events, kCuda);
  if (!allocations) return std::nullopt;
  AllocationHistory history;
  history.source = "the trace's [memory] events";
  const auto first = std::find_if(
      trace.memory_events.begin(), trace.memory_events.end(), [](const MemoryEvent& m) {
        return m.device_type == kCuda && m.addr && m.bytes != 0 && m.total_allocated;
      });
  if (first != trace.memory_events.end()) {
    sim::Bytes before = *first->total_allocated - first->bytes;
    for (const Allocation& a : *allocations) {
      if (!a.alloc_ns) before -= a.bytes;  // freed in the trace: accounted for
    }
    history.held_throughout = std::max<sim::Bytes>(0, before);
  }
  history.allocations = std::move(*allocations);
  return history;
}

sim::Bytes allocator_bytes(sim::Bytes bytes, std::int64_t device_type) {
  if (device_type == 0) return bytes;
  constexpr sim::Bytes kBlock = 512;  // c10::cuda::CUDACachingAllocator's kMinBlockSize
  if (bytes < kBlock) return kBlock;
  return (bytes + kBlock - 1) / kBlock * kBlock;
}

}  // namespace memplan::importers
