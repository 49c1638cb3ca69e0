#include "io/memory_snapshot_export.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.hpp"
#include "core/input_error.hpp"

namespace memplan::sim {
namespace {

// Pickle protocol 2, for the plain values a snapshot holds. A container is opened with its empty
// value and a MARK, filled, and closed with APPENDS or SETITEMS (a dict's items as key, value).
class PickleWriter {
 public:
  PickleWriter() { out_ = "\x80\x02"; }  // PROTO 2

  void none() { out_ += 'N'; }
  void boolean(bool v) { out_ += static_cast<char>(v ? 0x88 : 0x89); }  // NEWTRUE, NEWFALSE
  void integer(std::int64_t v) {
    if (v >= std::numeric_limits<std::int32_t>::min() &&
        v <= std::numeric_limits<std::int32_t>::max()) {
      out_ += 'J';  // BININT: 4 bytes, little-endian, signed
      little_endian(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
      return;
    }
    out_ += static_cast<char>(0x8a);  // LONG1: 8 bytes of two's complement
    out_ += static_cast<char>(8);
    little_endian(static_cast<std::uint64_t>(v), 8);
  }
  void number(double v) {
    out_ += 'G';  // BINFLOAT: 8 bytes, big-endian
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xFFU);
  }
  void text(std::string_view s) {
    out_ += 'X';  // BINUNICODE: 4-byte length, UTF-8
    little_endian(s.size(), 4);
    out_ += s;
  }
  void key(std::string_view k) { text(k); }
  void begin_list() { out_ += "]("; }                        // EMPTY_LIST, MARK
  void end_list() { out_ += 'e'; }                           // APPENDS
  void begin_dict() { out_ += "}("; }                        // EMPTY_DICT, MARK
  void end_dict() { out_ += 'u'; }                           // SETITEMS
  std::string finish() && { return std::move(out_) + '.'; }  // STOP

 private:
  void little_endian(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xFFU);
  }
  std::string out_;
};

// Where segments sit: each one taken from the driver gets an address of its own, 2 MiB aligned,
// from where CUDA's allocations typically start.
constexpr std::int64_t kFirstAddress = std::int64_t{0x7f0000000000};
constexpr std::int64_t kSegmentAlignment = std::int64_t{2} << 20;
constexpr Bytes kSmallRequest = Bytes{1} << 20;  // c10's kSmallSize: the small pool's largest block

struct Block {
  Bytes bytes = 0;
  Bytes requested = 0;
  BufferId buffer = kNoBuffer;
  OpId op = kNoOp;
};

struct Segment {
  std::int64_t address = 0;
  Bytes bytes = 0;
  std::map<Bytes, Block> blocks;  // live, by offset
  /// An expandable segment's address space: its mapped pages as runs, [offset, end) by offset.
  bool expandable = false;
  std::map<Bytes, Bytes> mapped;
  bool small = false;  // an expandable one serves the small pool (blocks of at most 1 MiB)
};

// `runs` with [lo, hi) added, merged with the runs it touches.
void add_run(std::map<Bytes, Bytes>& runs, Bytes lo, Bytes hi) {
  auto it = runs.lower_bound(lo);
  if (it != runs.begin() && std::prev(it)->second >= lo) --it;
  while (it != runs.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = runs.erase(it);
  }
  runs[lo] = hi;
}

// `runs` less [lo, hi): the parts of runs outside it stay.
void erase_run(std::map<Bytes, Bytes>& runs, Bytes lo, Bytes hi) {
  auto it = runs.lower_bound(lo);
  if (it != runs.begin() && std::prev(it)->second > lo) --it;
  while (it != runs.end() && it->first < hi) {
    const auto [start, end] = *it;
    it = runs.erase(it);
    if (start < lo) runs[start] = lo;
    if (end > hi) runs[hi] = end;
  }
}

class Writer {
 public:
  Writer(const Timeline& timeline, const Program& program, const Workload& workload,
         const Machine& machine)
      : timeline_(timeline), program_(program), workload_(workload), machine_(machine) {}

  std::string write() && {
    p_.begin_dict();
    p_.key("device_traces");
    p_.begin_list();
    p_.begin_list();
    replay();
    p_.end_list();
    p_.end_list();
    p_.key("segments");
    p_.begin_list();
    for (const auto& [number, segment] : segments_) {
      if (!segment.expandable) write_segment(segment, 0, segment.bytes);
      // Each run of mapped pages is a segment of its own, as c10's snapshot() lists them.
      for (const auto& [lo, hi] : segment.mapped) write_segment(segment, lo, hi);
    }
    p_.end_list();
    write_settings();
    p_.end_dict();
    return std::move(p_).finish();
  }

 private:
  // The trace, event by event, keeping the segments and their live blocks up to date. Under the
  // arena model (no segment events) the arena is one segment from the start.
  void replay() {
    // The arena's peak reserved bytes are the highest end of a block it handed out.
    if (machine_.allocator == AllocatorModel::kArena)
      take_segment(0, timeline_.peak_reserved_bytes, 0, kNoOp);
    for (const AllocatorEvent& e : timeline_.allocator_events) {
      switch (e.kind) {
        case AllocatorEvent::Kind::kSegmentAlloc:
          take_segment(e.segment, e.bytes, e.time_ns, e.op);
          break;
        case AllocatorEvent::Kind::kSegmentFree: {
          const auto it = segments_.find(e.segment);
          MEMPLAN_CHECK(it != segments_.end() && it->second.blocks.empty(),
                        "a segment given back was taken and holds no live block");
          event("segment_free", it->second.address, it->second.bytes, e.time_ns, {}, e.op);
          segments_.erase(it);
          break;
        }
        case AllocatorEvent::Kind::kSegmentMap: {
          Segment& s = expandable_segment(e.segment);
          add_run(s.mapped, e.offset, e.offset + e.bytes);
          event("segment_map", s.address + e.offset, e.bytes, e.time_ns, {}, e.op);
          break;
        }
        case AllocatorEvent::Kind::kSegmentUnmap: {
          Segment& s = expandable_segment(e.segment);
          erase_run(s.mapped, e.offset, e.offset + e.bytes);
          event("segment_unmap", s.address + e.offset, e.bytes, e.time_ns, {}, e.op);
          break;
        }
        case AllocatorEvent::Kind::kAlloc: {
          Segment& s = segments_.at(e.segment);
          const Block b{e.bytes, program_.buffers[index(e.buffer)].bytes, e.buffer, e.op};
          s.blocks[e.offset] = b;
          if (s.expandable && e.bytes <= kSmallRequest) s.small = true;
          event("alloc", s.address + e.offset, b.requested, e.time_ns, e.buffer, e.op);
          break;
        }
        case AllocatorEvent::Kind::kFree: {
          Segment& s = segments_.at(e.segment);
          const Bytes requested = program_.buffers[index(e.buffer)].bytes;
          s.blocks.erase(e.offset);
          event("free_requested", s.address + e.offset, requested, e.time_ns, e.buffer, e.op);
          event("free_completed", s.address + e.offset, requested, e.time_ns, e.buffer, e.op);
          break;
        }
      }
    }
  }

  // An expandable segment's address space, placed when its first pages are mapped: c10 reserves
  // 1 1/8 of the device's memory for each (caching_allocator.hpp).
  Segment& expandable_segment(std::int32_t number) {
    const auto [it, added] = segments_.try_emplace(number);
    if (added) {
      it->second.address = next_address_;
      it->second.expandable = true;
      const Bytes space = machine_.memory_bytes + machine_.memory_bytes / 8;
      next_address_ += (space + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
    }
    return it->second;
  }

  // The settings the step ran under, as c10's snapshot() writes them (what the replay of the
  // snapshot reads back: importers/snapshot/allocator_replay.hpp).
  void write_settings() {
    const AllocatorConfig& c = machine_.allocator_config;
    p_.key("allocator_settings");
    p_.begin_dict();
    p_.key("PYTORCH_CUDA_ALLOC_CONF");
    p_.text(to_string(c));
    p_.key("max_split_size");
    p_.integer(c.max_split_size == AllocatorConfig::kNoMaxSplit ? -1 : c.max_split_size);
    p_.key("garbage_collection_threshold");
    p_.number(c.garbage_collection_threshold);
    p_.key("expandable_segments");
    p_.boolean(c.expandable_segments);
    p_.key("roundup_power2_divisions");
    p_.begin_dict();
    for (std::size_t i = 0; i < c.roundup_power2_divisions.size(); ++i) {
      p_.key(std::to_string(std::int64_t{1} << i));  // the interval's start in MiB, as c10 keys it
      p_.integer(c.roundup_power2_divisions[i]);
    }
    p_.end_dict();
    p_.end_dict();
  }

  void take_segment(std::int32_t number, Bytes bytes, Nanoseconds t, OpId op) {
    Segment s;
    s.address = next_address_;
    s.bytes = bytes;
    next_address_ += (bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
    event("segment_alloc", s.address, s.bytes, t, {}, op);
    segments_[number] = std::move(s);
  }

  // A frame list: the buffer's name, then the op it serves.
  void frames(std::optional<BufferId> buffer, OpId op) {
    p_.begin_list();
    auto frame = [&](const std::string& name) {
      p_.begin_dict();
      p_.key("filename");
      p_.text("memplan");
      p_.key("line");
      p_.integer(0);
      p_.key("name");
      p_.text(name);
      p_.end_dict();
    };
    if (buffer && *buffer != kNoBuffer) frame(buffer_label(*buffer, program_, workload_));
    if (op != kNoOp) frame("op " + workload_.op(op).name);
    p_.end_list();
  }

  void event(std::string_view action, std::int64_t address, Bytes bytes, Nanoseconds t,
             std::optional<BufferId> buffer, OpId op) {
    p_.begin_dict();
    p_.key("action");
    p_.text(action);
    p_.key("addr");
    p_.integer(address);
    p_.key("size");
    p_.integer(bytes);
    p_.key("stream");
    p_.integer(0);
    p_.key("time_us");
    p_.integer(t / 1000);
    p_.key("frames");
    frames(buffer, op);
    p_.end_dict();
  }

  void block(std::int64_t address, Bytes bytes, Bytes requested, bool live, const Block* b) {
    p_.begin_dict();
    p_.key("address");
    p_.integer(address);
    p_.key("size");
    p_.integer(bytes);
    p_.key("requested_size");
    p_.integer(requested);
    p_.key("state");
    p_.text(live ? "active_allocated" : "inactive");
    p_.key("frames");
    if (b != nullptr) {
      frames(b->buffer, b->op);
    } else {
      frames(std::nullopt, kNoOp);
    }
    p_.end_dict();
  }

  // The segment's [lo, hi) tiled by its blocks: the live ones, and the gaps between them as
  // inactive blocks.
  void write_segment(const Segment& s, Bytes lo, Bytes hi) {
    const auto first = s.blocks.lower_bound(lo);
    const auto last = s.blocks.lower_bound(hi);
    Bytes allocated = 0, requested = 0;
    for (auto it = first; it != last; ++it) {
      allocated += it->second.bytes;
      requested += it->second.requested;
    }
    p_.begin_dict();
    p_.key("device");
    p_.integer(0);
    p_.key("address");
    p_.integer(s.address + lo);
    p_.key("total_size");
    p_.integer(hi - lo);
    p_.key("allocated_size");
    p_.integer(allocated);
    p_.key("active_size");
    p_.integer(allocated);
    p_.key("requested_size");
    p_.integer(requested);
    p_.key("stream");
    p_.integer(0);
    p_.key("segment_type");
    p_.text((s.expandable ? s.small : hi - lo <= kSegmentAlignment) ? "small" : "large");
    p_.key("is_expandable");
    p_.boolean(s.expandable);
    p_.key("frames");
    frames(std::nullopt, kNoOp);
    p_.key("blocks");
    p_.begin_list();
    Bytes at = lo;
    for (auto it = first; it != last; ++it) {
      const auto& [offset, b] = *it;
      if (offset > at) block(s.address + at, offset - at, 0, false, nullptr);
      block(s.address + offset, b.bytes, b.requested, true, &b);
      at = offset + b.bytes;
    }
    if (at < hi) block(s.address + at, hi - at, 0, false, nullptr);
    p_.end_list();
    p_.end_dict();
  }

  const Timeline& timeline_;
  const Program& program_;
  const Workload& workload_;
  const Machine& machine_;
  PickleWriter p_;
  std::map<std::int32_t, Segment> segments_;
  std::int64_t next_address_ = kFirstAddress;
};

}  // namespace

std::string memory_snapshot_pickle(const Timeline& timeline, const Program& program,
                                   const Workload& workload, const Machine& machine) {
  return Writer(timeline, program, workload, machine).write();
}

}  // namespace memplan::sim
