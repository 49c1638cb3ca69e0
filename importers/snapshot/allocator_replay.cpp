#include "importers/snapshot/allocator_replay.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.hpp"
#include "memory/caching_allocator.hpp"

namespace memplan::importers {

namespace {

constexpr std::int64_t kUnlimited = std::int64_t{1} << 50;

// A size the model can take: a real allocator's never passes the model's address space; a
// hostile snapshot's may be anything.
bool plausible(std::int64_t size) {
  return size >= 0 && size <= kUnlimited;
}

// The snapshot's settings as the model takes them.
sim::AllocatorConfig settings_of(const MemorySnapshot& snapshot) {
  sim::AllocatorConfig settings;
  if (!snapshot.settings) return settings;
  settings.expandable_segments = snapshot.settings->expandable_segments;
  settings.garbage_collection_threshold = snapshot.settings->garbage_collection_threshold;
  if (snapshot.settings->max_split_size >= 0) {
    settings.max_split_size = snapshot.settings->max_split_size;
  }
  // Keyed by the interval's start in MiB (1, 2, 4, ..., 32768): index log2 of it.
  for (const auto& [mib, divisions] : snapshot.settings->roundup_power2_divisions) {
    if (mib <= 0) continue;
    const auto index =
        static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(mib)) - 1);
    if (index < settings.roundup_power2_divisions.size()) {
      settings.roundup_power2_divisions[index] = divisions;
    }
  }
  return settings;
}

struct SegmentAtStart {
  std::int64_t size = 0;
  std::int64_t stream = 0;
  bool small = false;
};

// A run of an expandable segment's mapped pages: [address, end).
struct MappedRun {
  std::int64_t end = 0;
  std::int64_t stream = 0;
  bool small = false;
};
using MappedRuns = std::map<std::int64_t, MappedRun>;  // by address

// `runs` less [lo, hi): the parts of runs outside it stay.
void erase_range(MappedRuns& runs, std::int64_t lo, std::int64_t hi) {
  auto it = runs.lower_bound(lo);
  if (it != runs.begin() && std::prev(it)->second.end > lo) --it;
  while (it != runs.end() && it->first < hi) {
    const auto [start, run] = *it;
    it = runs.erase(it);
    if (start < lo) runs[start] = {lo, run.stream, run.small};
    if (run.end > hi) runs[hi] = {run.end, run.stream, run.small};
  }
}

// The pool of an expandable segment's range at `address` of `stream`: that of the dump's run
// nearest below it on the stream (the same address space: c10 reserves one per pool and stream),
// else nearest above, else the large pool. `pools`: the dump's runs by (stream, address).
bool small_pool_at(const std::map<std::pair<std::int64_t, std::int64_t>, bool>& pools,
                   std::int64_t address, std::int64_t stream) {
  auto it = pools.upper_bound({stream, address});
  if (it != pools.begin() && std::prev(it)->first.first == stream) return std::prev(it)->second;
  if (it != pools.end() && it->first.first == stream) return it->second;
  return false;
}

// The device as it was at the first event: cudaMalloc'ed segments (the dump's, less those the
// events cudaMalloc'ed, plus those they cudaFree'd), and expandable segments' mapped pages (the
// dump's runs, less those the events mapped, plus those they unmapped). A small segment is the
// 2 MiB one c10 makes for requests up to 1 MiB, as the dump's segment_type says.
struct DeviceAtStart {
  std::map<std::int64_t, SegmentAtStart> segments;  // by address
  MappedRuns mapped;
  // Per stream and pool, the lowest address an expandable segment is seen at: its start.
  std::map<std::pair<std::int64_t, bool>, std::int64_t> expandable_base;
};

DeviceAtStart device_at_first_event(const MemorySnapshot& snapshot, const SnapshotHistory& h,
                                    const std::vector<SnapshotEvent>& events) {
  DeviceAtStart d;
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != h.device) continue;
    const bool small = s.segment_type.empty() ? s.total_size == sim::CachingAllocator::kSmallBuffer
                                              : s.segment_type == "small";
    if (s.expandable) {
      if (plausible(s.address) && plausible(s.total_size)) {
        d.mapped[s.address] = {s.address + s.total_size, s.stream, small};
      }
    } else {
      d.segments[s.address] = {s.total_size, s.stream, small};
    }
  }
  std::map<std::pair<std::int64_t, std::int64_t>, bool> pools;  // the dump's runs' pools
  for (const auto& [address, run] : d.mapped) pools[{run.stream, address}] = run.small;
  const auto seen = [&](std::int64_t address, std::int64_t stream, bool small) {
    auto [it, fresh] = d.expandable_base.try_emplace({stream, small}, address);
    if (!fresh) it->second = std::min(it->second, address);
  };
  for (const auto& [address, run] : d.mapped) seen(address, run.stream, run.small);
  for (std::size_t i = events.size(); i-- > 0;) {  // newest first
    const SnapshotEvent& e = events[i];
    if (e.action == "segment_alloc") d.segments.erase(e.address);
    if (e.action == "segment_free") {
      d.segments[e.address] = {e.size, e.stream, e.size == sim::CachingAllocator::kSmallBuffer};
    }
    if ((e.action == "segment_map" || e.action == "segment_unmap") && plausible(e.size) &&
        plausible(e.address)) {
      const bool small = small_pool_at(pools, e.address, e.stream);
      seen(e.address, e.stream, small);
      erase_range(d.mapped, e.address, e.address + e.size);
      if (e.action == "segment_unmap") d.mapped[e.address] = {e.address + e.size, e.stream, small};
    }
  }
  return d;
}

// The blocks live before the first event, by address, with their block sizes: freed by an event
// before any `alloc` of theirs (the event's size, rounded as the model rounds a request of it when
// the events give requests), or live at the dump without one.
std::map<std::int64_t, std::int64_t> live_before(const std::vector<SnapshotEvent>& events,
                                                 const MemorySnapshot& snapshot,
                                                 const SnapshotHistory& h,
                                                 const sim::CachingAllocator& model) {
  std::map<std::int64_t, std::int64_t> before;
  std::set<std::int64_t> open;
  for (const SnapshotEvent& e : events) {
    if (e.action == "alloc") open.insert(e.address);
    if (e.action != "free_requested") continue;
    if (open.erase(e.address) == 0) {
      before.emplace(e.address, h.events_give_requests ? model.request_size(e.size) : e.size);
    }
  }
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != h.device) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == "active_allocated" && open.count(b.address) == 0) {
        before.emplace(b.address, b.size);
      }
    }
  }
  return before;
}

// What this snapshot shows that the model does not do (the module comment).
std::vector<std::string> unmodelled(const MemorySnapshot& snapshot, std::size_t unplaced,
                                    std::size_t unheld) {
  std::vector<std::string> out;
  if (snapshot.settings && snapshot.settings->garbage_collection_threshold > 0) {
    out.push_back(fmt::format(
        "garbage_collection_threshold {:g}: c10 collects only under a per-process memory "
        "fraction, which a snapshot does not record; the replay's device is unlimited, so the "
        "model never collects",
        snapshot.settings->garbage_collection_threshold));
  }
  if (unheld > 0) {
    out.push_back(
        fmt::format("{} segments held at the first event of no size the model can hold "
                    "(none, or past its 2^50-byte address space): left out",
                    unheld));
  }
  if (unplaced > 0) {
    out.push_back(
        fmt::format("{} blocks live before the first event lie in no segment the "
                    "snapshot gives for that time: the model placed them itself",
                    unplaced));
  }
  return out;
}

// The model as the replay drives it: where the real segments and blocks are in it.
class Replay {
 public:
  Replay(const MemorySnapshot& snapshot, const SnapshotHistory& history)
      : model_(kUnlimited, settings_of(snapshot)) {
    r_.device = history.device;
  }

  // The segments held at the first event, and the blocks live then in them.
  void seed(const DeviceAtStart& device, const std::map<std::int64_t, std::int64_t>& blocks) {
    for (const auto& [address, s] : device.segments) {
      const auto added = s.size > 0 && plausible(s.size) && plausible(address)
                             ? model_.add_segment(address, s.size, s.small, s.stream)
                             : std::nullopt;
      if (added)
        segment_at_[address] = *added;
      else
        ++unheld_;
    }
    for (const auto& [key, base] : device.expandable_base) {
      if (plausible(base)) {
        segment_at_[base] = model_.add_expandable_segment(base, key.second, key.first);
      }
    }
    for (const auto& [address, run] : device.mapped) {
      const auto base = device.expandable_base.find({run.stream, run.small});
      const bool mapped =
          base != device.expandable_base.end() && plausible(base->second) && plausible(run.end) &&
          model_.map(segment_at_[base->second], address - base->second, run.end - address);
      if (!mapped) ++unheld_;
    }
    r_.seeded_segments = model_.segment_count();
    for (const auto& [address, size] : blocks) {
      if (!plausible(size)) {
        ++r_.failed_allocs;
        continue;
      }
      std::optional<sim::CachingAllocator::Handle> placed;
      if (auto holder = segment_at_.upper_bound(address); holder != segment_at_.begin()) {
        --holder;
        placed = model_.place(holder->second, address - holder->first, size);
      }
      if (!placed) {  // in no segment of that time: the model places it itself
        ++unplaced_;
        if (const auto p = model_.allocate(size)) placed = p->handle;
      }
      if (placed) {
        handles_[address] = *placed;
        ++r_.seeded_blocks;
      } else {
        ++r_.failed_allocs;
      }
    }
  }

  void play(const std::vector<SnapshotEvent>& events, std::int64_t reserved) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      const SnapshotEvent& e = events[i];
      if (e.action == "segment_alloc" || e.action == "segment_map") reserved += e.size;
      if (e.action == "segment_free" || e.action == "segment_unmap") reserved -= e.size;
      if (e.action == "segment_alloc" || (e.action == "segment_map" && !new_memory_at_)) {
        new_memory_at_ = e.address;  // (a request maps its lowest pages first)
      } else if (e.action == "alloc") {
        allocate(e, i);
      } else if (e.action == "free_completed") {
        if (const auto it = handles_.find(e.address); it != handles_.end()) {
          model_.release(it->second);
          handles_.erase(it);
        }
      } else if (e.action == "segment_free") {
        if (const auto it = segment_at_.find(e.address); it != segment_at_.end()) {
          if (!model_.release_segment(it->second)) ++r_.segments_kept;
          segment_at_.erase(it);
        }
      } else if (e.action == "segment_unmap") {
        unmap(e);
      } else if (e.action == "oom") {
        ++r_.ooms;
        if (e.device_free && plausible(e.size) &&
            model_.fails_with_free(e.size, e.stream, *e.device_free)) {
          ++r_.ooms_reproduced;
        } else if (!r_.first_oom_served) {
          r_.first_oom_served = i;
        }
      }
      // (After a segment_alloc or _map the model has not taken the memory yet: it does at the
      // alloc.)
      if (!r_.first_reserved_mismatch && e.action != "segment_alloc" && e.action != "segment_map" &&
          model_.reserved_bytes() != reserved) {
        r_.first_reserved_mismatch = i;
      }
    }
  }

  AllocatorReplay result(const MemorySnapshot& snapshot) {
    r_.reserved_at_end = model_.reserved_bytes();
    r_.allocated_at_end = model_.live_bytes();
    r_.peak_reserved = model_.peak_reserved_bytes();
    r_.peak_allocated = model_.peak_live_bytes();
    r_.segments_at_end = model_.segment_count();
    r_.differences = unmodelled(snapshot, unplaced_, unheld_);
    return r_;
  }

  [[nodiscard]] const sim::CachingAllocator& model() const { return model_; }

 private:
  void allocate(const SnapshotEvent& e, std::size_t i) {
    ++r_.allocations;
    const std::int64_t at = new_memory_at_ && plausible(*new_memory_at_) ? *new_memory_at_ : -1;
    const auto placed = plausible(e.size) ? model_.allocate(e.size, e.stream, at) : std::nullopt;
    if (placed) {
      handles_[e.address] = placed->handle;
      if (model_.segment_address(placed->segment) + placed->offset == e.address) {
        ++r_.placed_as_recorded;
      } else if (!r_.first_misplaced) {
        r_.first_misplaced = i;
      }
      if (model_.segment_created() && new_memory_at_) {
        segment_at_[*new_memory_at_] = *model_.segment_created();
      }
    } else {
      ++r_.failed_allocs;
    }
    new_memory_at_.reset();
  }

  // The program's empty_cache (or c10's, before a retry) unmapped these pages: the model unmaps
  // them too where they are free in it.
  void unmap(const SnapshotEvent& e) {
    const auto s = plausible(e.address) && plausible(e.size)
                       ? model_.expandable_segment_holding(e.address)
                       : std::nullopt;
    if (!s || model_.unmap(*s, e.address - model_.segment_address(*s), e.size) < e.size) {
      ++r_.segments_kept;
    }
  }

  sim::CachingAllocator model_;
  AllocatorReplay r_;
  // The real segments by address and the model's, for the program's cudaFree (empty_cache).
  std::map<std::int64_t, sim::CachingAllocator::Segment> segment_at_;
  std::map<std::int64_t, sim::CachingAllocator::Handle> handles_;  // address -> live block
  // The last segment_alloc (or first segment_map) before an alloc: where its new memory is.
  std::optional<std::int64_t> new_memory_at_;
  std::size_t unheld_ = 0;    // segments of no size the model can hold
  std::size_t unplaced_ = 0;  // blocks in no segment of the first event
};

}  // namespace

AllocatorReplay replay_allocator(const MemorySnapshot& snapshot, const SnapshotHistory& history) {
  static const std::vector<SnapshotEvent> kNone;
  const auto device = static_cast<std::size_t>(history.device);
  const std::vector<SnapshotEvent>& events =
      device < snapshot.device_traces.size() ? snapshot.device_traces[device] : kNone;
  Replay replay(snapshot, history);
  replay.seed(device_at_first_event(snapshot, history, events),
              live_before(events, snapshot, history, replay.model()));
  replay.play(events, history.reserved_at_first_event);
  return replay.result(snapshot);
}

}  // namespace memplan::importers
