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
};

class Writer {
 public:
  Writer(const Timeline& timeline, const Program& program, const Workload& workload)
      : timeline_(timeline), program_(program), workload_(workload) {}

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
    for (const auto& [number, segment] : segments_) write_segment(segment);
    p_.end_list();
    p_.end_dict();
    return std::move(p_).finish();
  }

 private:
  // The trace, event by event, keeping the segments and their live blocks up to date. Under the
  // arena model (no segment events) the arena is one segment from the start.
  void replay() {
    const bool arena = std::none_of(
        timeline_.allocator_events.begin(), timeline_.allocator_events.end(),
        [](const AllocatorEvent& e) { return e.kind == AllocatorEvent::Kind::kSegmentAlloc; });
    // The arena's peak reserved bytes are the highest end of a block it handed out.
    if (arena) take_segment(0, timeline_.peak_reserved_bytes, 0, kNoOp);
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
        case AllocatorEvent::Kind::kAlloc: {
          Segment& s = segments_.at(e.segment);
          const Block b{e.bytes, program_.buffers[index(e.buffer)].bytes, e.buffer, e.op};
          s.blocks[e.offset] = b;
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

  // A segment tiled by its blocks: the live ones, and the gaps between them as inactive blocks.
  void write_segment(const Segment& s) {
    Bytes allocated = 0, requested = 0;
    for (const auto& [offset, b] : s.blocks) {
      allocated += b.bytes;
      requested += b.requested;
    }
    p_.begin_dict();
    p_.key("device");
    p_.integer(0);
    p_.key("address");
    p_.integer(s.address);
    p_.key("total_size");
    p_.integer(s.bytes);
    p_.key("allocated_size");
    p_.integer(allocated);
    p_.key("active_size");
    p_.integer(allocated);
    p_.key("requested_size");
    p_.integer(requested);
    p_.key("stream");
    p_.integer(0);
    p_.key("segment_type");
    p_.text(s.bytes <= kSegmentAlignment ? "small" : "large");
    p_.key("is_expandable");
    p_.boolean(false);
    p_.key("frames");
    frames(std::nullopt, kNoOp);
    p_.key("blocks");
    p_.begin_list();
    Bytes at = 0;
    for (const auto& [offset, b] : s.blocks) {
      if (offset > at) block(s.address + at, offset - at, 0, false, nullptr);
      block(s.address + offset, b.bytes, b.requested, true, &b);
      at = offset + b.bytes;
    }
    if (at < s.bytes) block(s.address + at, s.bytes - at, 0, false, nullptr);
    p_.end_list();
    p_.end_dict();
  }

  const Timeline& timeline_;
  const Program& program_;
  const Workload& workload_;
  PickleWriter p_;
  std::map<std::int32_t, Segment> segments_;
  std::int64_t next_address_ = kFirstAddress;
};

}  // namespace

void require_snapshot_writable(const Machine& machine) {
  if (machine.allocator_config.expandable_segments) {
    throw InputError("--snapshot-out",
                     "a step under expandable segments (--alloc-conf) is not written as a "
                     "snapshot yet: its segments' pages are mapped and unmapped as it runs");
  }
}

std::string memory_snapshot_pickle(const Timeline& timeline, const Program& program,
                                   const Workload& workload, const Machine& machine) {
  require_snapshot_writable(machine);
  return Writer(timeline, program, workload).write();
}

}  // namespace memplan::sim
