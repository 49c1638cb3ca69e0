#include "importers/snapshot/allocator_replay.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.hpp"
#include "memory/caching_allocator.hpp"

namespace memplan::importers {

namespace {

constexpr std::int64_t kUnlimited = std::int64_t{1} << 50;

// The blocks live before the first event, by address: freed by an event before any `alloc` of
// theirs, or live at the dump without one. Sizes in the events' unit.
std::map<std::int64_t, std::int64_t> live_before(const std::vector<SnapshotEvent>& events,
                                                 const MemorySnapshot& snapshot,
                                                 const SnapshotHistory& h) {
  std::map<std::int64_t, std::int64_t> before;
  std::set<std::int64_t> open;
  for (const SnapshotEvent& e : events) {
    if (e.action == "alloc") open.insert(e.address);
    if (e.action != "free_requested") continue;
    if (open.erase(e.address) == 0) before.emplace(e.address, e.size);
  }
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != h.device) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == "active_allocated" && open.count(b.address) == 0) {
        before.emplace(b.address, h.events_give_requests ? b.requested_size : b.size);
      }
    }
  }
  return before;
}

// What this snapshot shows that the model does not do (the module comment).
std::vector<std::string> unmodelled(const MemorySnapshot& snapshot, const SnapshotHistory& h,
                                    const std::vector<SnapshotEvent>& events,
                                    std::int64_t seeded_reserved) {
  std::vector<std::string> out;
  std::set<std::int64_t> streams;
  for (const SnapshotEvent& e : events) streams.insert(e.stream);
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device == h.device) streams.insert(s.stream);
  }
  if (streams.size() > 1) {
    out.push_back(
        fmt::format("{} streams ({}): PyTorch keeps a stream's cached blocks for that "
                    "stream, the model pools them",
                    streams.size(), fmt::join(streams, ", ")));
  }
  if (snapshot.settings) {
    const AllocatorSettings& a = *snapshot.settings;
    if (a.max_split_size >= 0) {
      out.push_back(fmt::format("max_split_size {} (not modelled)", a.max_split_size));
    }
    if (a.expandable_segments) out.emplace_back("expandable segments (not modelled)");
    if (a.garbage_collection_threshold > 0) {
      out.push_back(fmt::format("garbage_collection_threshold {:g} (not modelled)",
                                a.garbage_collection_threshold));
    }
    if (std::any_of(a.roundup_power2_divisions.begin(), a.roundup_power2_divisions.end(),
                    [](const auto& d) { return d.second > 0; })) {
      out.emplace_back("roundup_power2_divisions (not modelled)");
    }
  }
  if (const auto it = h.actions.find("segment_free"); it != h.actions.end()) {
    out.push_back(
        fmt::format("{} segments given back by the program (torch.cuda.empty_cache), "
                    "which the model keeps",
                    it->second));
  }
  if (h.reserved_at_first_event > seeded_reserved) {
    out.push_back(
        fmt::format("{} reserved at the first event in cached free segments, which the "
                    "model starts without",
                    sim::format_bytes(h.reserved_at_first_event - seeded_reserved)));
  }
  return out;
}

}  // namespace

AllocatorReplay replay_allocator(const MemorySnapshot& snapshot, const SnapshotHistory& history) {
  static const std::vector<SnapshotEvent> kNone;
  const auto device = static_cast<std::size_t>(history.device);
  const std::vector<SnapshotEvent>& events =
      device < snapshot.device_traces.size() ? snapshot.device_traces[device] : kNone;
  sim::CachingAllocator model(kUnlimited);
  AllocatorReplay r;
  r.device = history.device;
  std::map<std::int64_t, sim::CachingAllocator::Handle> handles;  // address -> live block
  for (const auto& [address, size] : live_before(events, snapshot, history)) {
    if (const auto placed = model.allocate(size)) {
      handles[address] = placed->handle;
      ++r.seeded_blocks;
    } else {
      ++r.failed_allocs;
    }
  }
  const std::int64_t seeded_reserved = model.reserved_bytes();
  for (const SnapshotEvent& e : events) {
    if (e.action == "alloc") {
      if (const auto placed = model.allocate(e.size)) {
        handles[e.address] = placed->handle;
      } else {
        ++r.failed_allocs;
      }
    } else if (e.action == "free_completed") {
      if (const auto it = handles.find(e.address); it != handles.end()) {
        model.release(it->second);
        handles.erase(it);
      }
    }
  }
  r.reserved_at_end = model.reserved_bytes();
  r.allocated_at_end = model.live_bytes();
  r.peak_reserved = model.peak_reserved_bytes();
  r.peak_allocated = model.peak_live_bytes();
  r.segments_at_end = model.segment_count();
  r.differences = unmodelled(snapshot, history, events, seeded_reserved);
  return r;
}

}  // namespace memplan::importers
