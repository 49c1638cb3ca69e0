#include "importers/kineto/memory_timeline.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "importers/kineto/saturating_add.hpp"

namespace memplan::importers {

namespace {

constexpr std::int64_t kCuda = 1;

void close_unrecorded(Allocation& a, sim::Nanoseconds by) {
  a.free_ns = by;
  a.free_unrecorded = true;
}

struct UnseenFree {
  sim::Nanoseconds seen_ns = 0;  // the first event whose Total Allocated lacks it
  sim::Bytes bytes = 0;
};

// Where the CUDA allocator's Total Allocated falls below what the events sum to, per device: by
// how many bytes and from which event. Events of two threads may carry totals out of their time
// order (the allocator counts, then the thread reports): a shortfall that a later event makes up
// is that; only a rise of the running shortfall above its highest so far is a free.
std::vector<UnseenFree> unseen_frees(const std::vector<MemoryEvent>& events) {
  struct Device {
    sim::Bytes total = 0;
    sim::Bytes shortfall = 0;
    sim::Bytes highest = 0;
  };
  std::map<std::int64_t, Device> devices;
  std::vector<UnseenFree> out;
  for (const MemoryEvent& m : events) {
    if (m.device_type != kCuda || !m.total_allocated) continue;
    const auto [it, first] = devices.try_emplace(m.device_id);
    Device& d = it->second;
    if (!first) {
      const sim::Bytes total = std::clamp(*m.total_allocated, -kSaturation, kSaturation);
      d.shortfall =
          saturating_add(d.shortfall, saturating_add(saturating_add(d.total, m.bytes), -total));
      if (d.shortfall > d.highest) {
        out.push_back({m.time_ns, d.shortfall - d.highest});
        d.highest = d.shortfall;
      }
    }
    d.total = *m.total_allocated;
  }
  return out;
}

// Each unseen free given to the oldest allocation of its size that no event frees while the
// trace holds it then: freed by the event that first shows it. The frees come in time order.
void time_unseen_frees(const std::vector<MemoryEvent>& events, std::vector<Allocation>& out) {
  std::map<sim::Bytes, std::deque<std::size_t>> unfreed;  // by size, oldest first
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].alloc_ns && (!out[i].free_ns || out[i].free_unrecorded))
      unfreed[out[i].bytes].push_back(i);
  }
  for (const UnseenFree& f : unseen_frees(events)) {
    const auto it = unfreed.find(f.bytes);
    if (it == unfreed.end()) continue;
    std::deque<std::size_t>& q = it->second;
    // Those whose address was handed out again before are gone for this free and every later.
    while (!q.empty() && out[q.front()].free_ns && *out[q.front()].free_ns < f.seen_ns)
      q.pop_front();
    if (q.empty() || *out[q.front()].alloc_ns >= f.seen_ns) continue;
    close_unrecorded(out[q.front()], f.seen_ns);
    q.pop_front();
  }
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
  if (device_type == kCuda) time_unseen_frees(events, out);
  return out;
}

std::optional<AllocationHistory> trace_allocation_history(const KinetoTrace& trace) {
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
