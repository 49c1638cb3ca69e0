#include "runtime/arena_device.hpp"

#include <algorithm>
#include <string>

#include "core/check.hpp"
#include "runtime/backend_error.hpp"
#include "runtime/encoded_formats.hpp"

namespace memplan::runtime {

ArenaDevice::ArenaDevice(sim::Bytes capacity_bytes, std::uint64_t seed,
                         sim::AllocatorModel allocator)
    : capacity_(capacity_bytes), allocator_(allocator), seed_(seed) {}

void ArenaDevice::unmap_all() {
  for (std::size_t s = 0; s < segment_base_.size(); ++s) {
    if (segment_base_[s] == nullptr) continue;
    unmap_segment(segment_base_[s],
                  memory_.segment_bytes(static_cast<sim::DeviceMemory::Segment>(s)));
    segment_base_[s] = nullptr;
  }
}

void ArenaDevice::begin_run(const sim::Workload& workload, const sim::Program& program) {
  workload_ = &workload;
  program_ = &program;
  // The arena's one segment stays mapped from run to run; the caching model starts every run
  // without segments, as the simulator does.
  if (allocator_ == sim::AllocatorModel::kCaching) unmap_all();
  memory_.reset(allocator_, capacity_);
  if (allocator_ == sim::AllocatorModel::kArena && segment_base_.empty()) {
    segment_base_.push_back(map_segment(capacity_));
  }
  place_.assign(program.buffers.size(), Place{});
  live_ = 0;
  peak_ = 0;
  events_.clear();
  run_start_ = std::chrono::steady_clock::now();
}

void ArenaDevice::log_event(sim::AllocatorEvent event) {
  event.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - run_start_)
                      .count();
  events_.push_back(event);
}

std::byte* ArenaDevice::data(sim::BufferId buffer) const {
  const Place& p = place_[index(buffer)];
  MEMPLAN_CHECK(p.segment >= 0, "a buffer is used only while allocated");
  return segment_base_[static_cast<std::size_t>(p.segment)] + p.offset;
}

void ArenaDevice::follow_segments() {
  using Kind = sim::AllocatorEvent::Kind;
  for (const sim::DeviceMemory::Segment s : memory_.segments_released()) {
    const auto i = static_cast<std::size_t>(s);
    unmap_segment(segment_base_[i], memory_.segment_bytes(s));
    segment_base_[i] = nullptr;
    log_event({.kind = Kind::kSegmentFree, .segment = s});
  }
  if (const auto s = memory_.segment_created()) {
    const auto i = static_cast<std::size_t>(*s);
    if (segment_base_.size() <= i) segment_base_.resize(i + 1, nullptr);
    segment_base_[i] = map_segment(memory_.segment_bytes(*s));
    log_event({.kind = Kind::kSegmentAlloc, .segment = *s, .bytes = memory_.segment_bytes(*s)});
  }
}

bool ArenaDevice::allocate(sim::BufferId buffer) {
  const auto b = index(buffer);
  const sim::Buffer& buf = program_->buffers[b];
  const auto placed = memory_.allocate(buf.bytes);
  follow_segments();
  if (!placed) return false;
  MEMPLAN_CHECK(placed->offset + buf.bytes <= memory_.segment_bytes(placed->segment),
                "a block stays within its segment");
  place_[b] = {placed->segment, placed->offset, placed->handle, placed->size};
  log_event({.kind = sim::AllocatorEvent::Kind::kAlloc,
             .buffer = buffer,
             .segment = placed->segment,
             .offset = placed->offset,
             .bytes = placed->size});
  live_ += buf.bytes;
  peak_ = std::max(peak_, live_);
  if (buf.initial) {
    initialise(buffer, workload_->tensor(buf.tensor));
  }
  return true;
}

void ArenaDevice::free(sim::BufferId buffer) {
  const auto b = index(buffer);
  MEMPLAN_CHECK(place_[b].segment >= 0, "a buffer is freed only while allocated");
  // Stream-ordered: later work that reuses these bytes is enqueued after every use of them on
  // the compute stream, and copy streams' uses are fenced by events before the free.
  memory_.release(place_[b].handle);
  log_event({.kind = sim::AllocatorEvent::Kind::kFree,
             .buffer = buffer,
             .segment = place_[b].segment,
             .offset = place_[b].offset,
             .bytes = place_[b].bytes});
  place_[b] = Place{};
  live_ -= program_->buffers[b].bytes;
}

MemoryStats ArenaDevice::memory_stats() const {
  MemoryStats s;
  s.peak_bytes = peak_;
  s.peak_reserved_bytes = memory_.peak_reserved_bytes();
  s.capacity_bytes = capacity_;
  s.live_bytes = live_;
  s.largest_free_block = memory_.largest_free_block();
  return s;
}

std::optional<sim::BufferId> ArenaDevice::resident_buffer(sim::TensorId t) const {
  if (program_ == nullptr) return std::nullopt;
  for (std::size_t b = 0; b < program_->buffers.size(); ++b) {
    const sim::Buffer& buf = program_->buffers[b];
    if (buf.tensor == t && buf.role == sim::BufferRole::kTensor && place_[b].segment >= 0) {
      return sim::buffer_id(b);
    }
  }
  return std::nullopt;
}

std::optional<sim::HostSlotId> ArenaDevice::resident_slot(sim::TensorId t) const {
  if (program_ == nullptr) return std::nullopt;
  for (std::size_t s = 0; s < program_->host_slots.size(); ++s) {
    const sim::HostSlot& slot = program_->host_slots[s];
    if (slot.tensor == t && slot.resident) return sim::host_slot_id(s);
  }
  return std::nullopt;
}

bool ArenaDevice::captures(const sim::Op& op, std::size_t o) const {
  return capture_ && (workload_->tensor(op.outputs[o]).kind == sim::TensorKind::kGradient ||
                      op.layer.rule().loss);
}

ArenaDevice::Codec ArenaDevice::codec(const sim::Instruction& in) const {
  const sim::Buffer& full = program_->buffers[index(in.buffer)];
  const sim::Buffer& packed = program_->buffers[index(in.encoded())];
  const sim::Tensor& t = workload_->tensor(full.tensor);
  if (!t.dtype.empty() && t.dtype != "float32") {
    throw BackendError("cannot encode '" + t.name + "' of dtype " + t.dtype);
  }
  const Codec c{t, full.bytes / 4, packed.encoding, packed.bytes,
                in.kind == sim::InstrKind::kEncode};
  if (c.encoding == sim::Encoding::kNone) {
    throw BackendError("encode '" + t.name + "': an encoded buffer without an encoding");
  }
  const sim::Bytes needed = encoded_bytes_written(c.encoding, c.values);
  if (needed > c.capacity) {
    throw BackendError("encode '" + t.name + "': " + std::to_string(needed) +
                       " bytes needed, the plan's buffer has " + std::to_string(c.capacity));
  }
  return c;
}

}  // namespace memplan::runtime
