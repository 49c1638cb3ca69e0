#include "importers/kineto/memory_timeline.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/core.h>

#include "core/input_error.hpp"

namespace memplan::importers {

std::optional<std::vector<Allocation>> pair_allocations(const std::vector<MemoryEvent>& events,
                                                        std::int64_t device_type,
                                                        std::string_view source) {
  std::vector<Allocation> out;
  std::map<std::int64_t, std::size_t> live;  // address -> index in out
  bool addressed = false;
  for (const MemoryEvent& m : events) {
    if (m.device_type != device_type || !m.addr || m.bytes == 0) continue;
    addressed = true;
    const auto where = [&] {
      return fmt::format("[memory] event at {} us, address {:#x}", m.time_ns / 1000, *m.addr);
    };
    const auto it = live.find(*m.addr);
    if (m.bytes > 0) {
      if (it != live.end()) {
        throw sim::InputError(std::string(source),
                              where() + ": allocated again before it was freed");
      }
      live.emplace(*m.addr, out.size());
      out.push_back({device_type, *m.addr, m.bytes, m.time_ns, std::nullopt, m.thread});
      continue;
    }
    if (it == live.end()) {  // allocated before the trace started
      out.push_back({device_type, *m.addr, -m.bytes, std::nullopt, m.time_ns, m.thread});
      continue;
    }
    Allocation& a = out[it->second];
    if (a.bytes != -m.bytes) {
      throw sim::InputError(
          std::string(source),
          fmt::format("{}: frees {} bytes of an allocation of {}", where(), -m.bytes, a.bytes));
    }
    a.free_ns = m.time_ns;
    live.erase(it);
  }
  if (!addressed) return std::nullopt;
  return out;
}

std::optional<AllocationHistory> trace_allocation_history(const KinetoTrace& trace) {
  constexpr std::int64_t kCuda = 1;
  auto allocations = pair_allocations(trace.memory_events, kCuda, trace.source);
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
