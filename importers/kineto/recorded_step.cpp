#include "importers/kineto/recorded_step.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "importers/kineto/saturating_add.hpp"

namespace memplan::importers {

RecordedStep measure_recorded_step(const KinetoTrace& trace, const StepWindow& step, bool gpu) {
  RecordedStep r;
  std::unordered_map<std::int64_t, sim::Nanoseconds> launch_time;
  for (const RuntimeEvent& e : trace.runtime_events) {
    if (e.correlation) launch_time.emplace(*e.correlation, e.start_ns);
  }
  std::vector<std::pair<sim::Nanoseconds, sim::Nanoseconds>> intervals;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.kind == GpuKind::kMemcpy) continue;
    sim::Nanoseconds at = g.start_ns;
    if (g.correlation) {
      if (auto it = launch_time.find(*g.correlation); it != launch_time.end()) at = it->second;
    }
    if (at < step.start_ns || at >= step.end_ns) continue;
    intervals.emplace_back(g.start_ns, g.start_ns + g.duration_ns);
  }
  r.span_ns = step.end_ns - step.start_ns;
  for (const auto& [begin, end] : intervals) r.span_ns = std::max(r.span_ns, end - step.start_ns);
  r.device_activities = intervals.size();
  for (const auto& [begin, end] : intervals)
    r.device_time_ns = saturating_add(r.device_time_ns, end - begin);
  std::sort(intervals.begin(), intervals.end());
  sim::Nanoseconds covered_to = 0;
  bool any = false;
  for (const auto& [begin, end] : intervals) {
    if (!any || begin >= covered_to) {
      r.device_busy_ns += end - begin;
      covered_to = end;
      any = true;
    } else if (end > covered_to) {
      r.device_busy_ns += end - covered_to;
      covered_to = end;
    }
  }
  const std::int64_t device = gpu ? 1 : 0;
  sim::Bytes level = 0;
  sim::Bytes at_start = 0;
  bool started = false;
  std::unordered_map<std::int64_t, sim::Bytes> live;  // address -> bytes
  sim::Bytes uncounted = 0;  // unrecorded frees the CPU's total still counts
  for (const MemoryEvent& m : trace.memory_events) {
    if (m.device_type != device) continue;
    if (m.time_ns >= step.end_ns) break;
    if (m.addr && m.bytes != 0) {
      // Note [Frees the profiler does not see] in memory_timeline.hpp.
      const auto [it, fresh] = live.try_emplace(*m.addr, m.bytes);
      const bool reused = !fresh && m.bytes > 0;
      if (reused || (!fresh && it->second != -m.bytes)) {
        if (m.time_ns >= step.start_ns) ++r.unrecorded_frees;
        if (!gpu && reused) uncounted = saturating_add(uncounted, it->second);
        // The events' own sum: what was there is freed, and a free of another size undone.
        level = saturating_add(level, reused ? -it->second : -it->second - m.bytes);
      }
      if (m.bytes > 0)
        it->second = m.bytes;
      else
        live.erase(it);
    }
    if (m.time_ns >= step.start_ns && !started) {
      at_start = level;
      started = true;
    }
    level = saturating_add(level, m.bytes);
    if (m.time_ns < step.start_ns) continue;
    r.peak_above_start_bytes = std::max(r.peak_above_start_bytes, saturating_add(level, -at_start));
    if (m.total_allocated) {
      r.peak_total_allocated_bytes = std::max(r.peak_total_allocated_bytes.value_or(0),
                                              saturating_add(*m.total_allocated, -uncounted));
    }
  }
  return r;
}

}  // namespace memplan::importers
