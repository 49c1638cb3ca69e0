#include "runtime/arena_device.hpp"

#include <algorithm>
#include <string>

#include "runtime/backend_error.hpp"
#include "runtime/encoded_formats.hpp"
#include "sim/check.hpp"

namespace memplan::runtime {

ArenaDevice::ArenaDevice(sim::Bytes capacity_bytes, std::uint64_t seed)
    : capacity_(capacity_bytes), seed_(seed), arena_(capacity_bytes) {}

void ArenaDevice::begin_run(const sim::Workload& workload, const sim::Program& program) {
  workload_ = &workload;
  program_ = &program;
  arena_.reset(capacity_);
  offset_.assign(program.buffers.size(), -1);
  live_ = 0;
  peak_ = 0;
}

std::byte* ArenaDevice::data(sim::BufferId buffer) const {
  const auto offset = offset_[index(buffer)];
  MEMPLAN_CHECK(offset >= 0, "a buffer is used only while allocated");
  return memory_ + offset;
}

bool ArenaDevice::allocate(sim::BufferId buffer) {
  const auto b = index(buffer);
  const sim::Buffer& buf = program_->buffers[b];
  const auto offset = arena_.allocate(buf.bytes);
  if (!offset) return false;
  MEMPLAN_CHECK(*offset + buf.bytes <= capacity_, "the arena stays within its capacity");
  offset_[b] = *offset;
  live_ += buf.bytes;
  peak_ = std::max(peak_, live_);
  if (buf.initial) {
    initialise(buffer, workload_->tensor(buf.tensor));
  }
  return true;
}

void ArenaDevice::free(sim::BufferId buffer) {
  const auto b = index(buffer);
  MEMPLAN_CHECK(offset_[b] >= 0, "a buffer is freed only while allocated");
  // Stream-ordered: later work that reuses these bytes is enqueued after every use of them on
  // the compute stream, and copy streams' uses are fenced by events before the free.
  arena_.release(offset_[b]);
  offset_[b] = -1;
  live_ -= program_->buffers[b].bytes;
}

MemoryStats ArenaDevice::memory_stats() const {
  MemoryStats s;
  s.peak_bytes = peak_;
  s.peak_reserved_bytes = arena_.peak_reserved_bytes();
  s.capacity_bytes = capacity_;
  s.live_bytes = live_;
  s.largest_free_block = arena_.largest_free_block();
  return s;
}

std::optional<sim::BufferId> ArenaDevice::resident_buffer(sim::TensorId t) const {
  if (program_ == nullptr) return std::nullopt;
  for (std::size_t b = 0; b < program_->buffers.size(); ++b) {
    const sim::Buffer& buf = program_->buffers[b];
    if (buf.tensor == t && buf.role == sim::BufferRole::kTensor && offset_[b] >= 0) {
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
