#include "importers/snapshot/snapshot_allocations.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"

namespace memplan::importers {

namespace {

std::int64_t pick_device(const MemorySnapshot& snapshot, std::optional<std::int64_t> device,
                         const std::string& source) {
  std::vector<std::int64_t> with_events;
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (!snapshot.device_traces[d].empty()) with_events.push_back(static_cast<std::int64_t>(d));
  }
  if (device) {
    if (std::find(with_events.begin(), with_events.end(), *device) == with_events.end()) {
      throw sim::InputError(source, fmt::format("device {} has no allocator events (devices with "
                                                "events: {})",
                                                *device, fmt::join(with_events, ", ")));
    }
    return *device;
  }
  if (with_events.empty()) {
    throw sim::InputError(source,
                          "no allocator events (the snapshot holds segments only: record with "
                          "torch.cuda.memory._record_memory_history before the steps)");
  }
  if (with_events.size() > 1) {
    throw sim::InputError(source, fmt::format("devices {} have allocator events: name the step's "
                                              "device (--snapshot-device)",
                                              fmt::join(with_events, ", ")));
  }
  return with_events.front();
}

}  // namespace

AllocationHistory snapshot_allocation_history(const MemorySnapshot& snapshot,
                                              std::optional<std::int64_t> device,
                                              sim::Nanoseconds trace_zero_ns,
                                              const std::string& source) {
  const std::int64_t d = pick_device(snapshot, device, source);
  constexpr std::int64_t kCuda = 1;
  AllocationHistory history;
  history.source = fmt::format("snapshot {} (device {})", source, d);
  std::map<std::int64_t, std::size_t> live;  // address -> index in history.allocations
  const auto& events = snapshot.device_traces[static_cast<std::size_t>(d)];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const SnapshotEvent& e = events[i];
    if (e.action != "alloc" && e.action != "free_requested") continue;
    const std::string where = fmt::format("device_traces[{}][{}]", d, i);
    if (!e.time_us) {
      throw sim::InputError(source, where +
                                        ": no time_us (PyTorch before 2.1): the snapshot "
                                        "cannot be joined with a trace by time");
    }
    const auto t = static_cast<sim::Nanoseconds>(std::llround(*e.time_us * 1000.0)) - trace_zero_ns;
    const auto it = live.find(e.address);
    if (e.action == "alloc") {
      if (it != live.end()) {
        throw sim::InputError(source, where + fmt::format(": address {:#x} allocated again before "
                                                          "it was freed",
                                                          e.address));
      }
      live.emplace(e.address, history.allocations.size());
      history.allocations.push_back({kCuda, e.address, e.size, t, std::nullopt, ""});
    } else if (it == live.end()) {  // allocated before the first event
      history.allocations.push_back({kCuda, e.address, e.size, std::nullopt, t, ""});
    } else {
      history.allocations[it->second].free_ns = t;
      live.erase(it);
    }
  }
  // Blocks allocated at the dump that no event allocated: held since before the first event.
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != d) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state != "active_allocated" || live.count(b.address) > 0) continue;
      const sim::Bytes bytes = b.requested_size > 0 ? b.requested_size : b.size;
      history.allocations.push_back({kCuda, b.address, bytes, std::nullopt, std::nullopt, ""});
    }
  }
  return history;
}

std::vector<AllocationHistory> read_snapshot_allocation_histories(
    const std::vector<std::filesystem::path>& snapshots, std::optional<std::int64_t> device,
    const std::vector<sim::Nanoseconds>& trace_zero_ns) {
  if (snapshots.empty()) {
    if (device) {
      throw sim::InputError("--snapshot-device",
                            "names a device of --snapshot, which is not given");
    }
    return {};
  }
  if (snapshots.size() != trace_zero_ns.size()) {
    throw sim::InputError("--snapshot",
                          fmt::format("{} snapshots for {} ranks: give one per rank, in rank order",
                                      snapshots.size(), trace_zero_ns.size()));
  }
  std::vector<AllocationHistory> histories;
  for (std::size_t i = 0; i < snapshots.size(); ++i) {
    histories.push_back(snapshot_allocation_history(read_memory_snapshot(snapshots[i]), device,
                                                    trace_zero_ns[i], snapshots[i].string()));
  }
  return histories;
}

}  // namespace memplan::importers
