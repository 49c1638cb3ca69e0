#include "host_backend/host_device.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <sys/mman.h>

#include "host_backend/encodings.hpp"
#include "host_backend/initial_data.hpp"
#include "sim/check.hpp"

namespace memplan::host_backend {

// ---- StreamWorker -------------------------------------------------------------------------------

StreamWorker::StreamWorker() : thread_([this] { loop(); }) {}

StreamWorker::~StreamWorker() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamWorker::enqueue(std::function<void()> task) {
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void StreamWorker::hold() {
  const std::lock_guard lock(mutex_);
  held_ = true;
}

void StreamWorker::release() {
  {
    const std::lock_guard lock(mutex_);
    held_ = false;
  }
  cv_.notify_all();
}

void StreamWorker::drain() {
  release();
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    std::rethrow_exception(e);
  }
}

void StreamWorker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (!held_ && !queue_.empty()); });
    if (queue_.empty() || held_) return;  // stop_ (the destructor drained first)
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    busy_ = false;
    if (queue_.empty()) cv_.notify_all();
  }
}

// ---- HostDevice ---------------------------------------------------------------------------------

HostDevice::HostDevice(sim::Bytes capacity_bytes, std::uint64_t seed)
    : capacity_(capacity_bytes), seed_(seed), arena_(capacity_bytes) {
  const auto length = static_cast<std::size_t>(std::max<sim::Bytes>(capacity_bytes, 1));
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw std::runtime_error("host device: cannot map " + std::to_string(capacity_bytes) +
                             " bytes of device memory");
  }
  memory_ = static_cast<std::byte*>(p);
  for (int s = 0; s < sim::kStreamCount; ++s) workers_.push_back(std::make_unique<StreamWorker>());
}

HostDevice::~HostDevice() {
  for (auto& w : workers_) w->release();  // all streams first: they may wait on each other
  for (auto& w : workers_) {
    try {
      w->drain();
    } catch (...) {  // NOLINT(bugprone-empty-catch): errors were reported by synchronize
    }
  }
  workers_.clear();  // join before the memory goes
  munmap(memory_, static_cast<std::size_t>(std::max<sim::Bytes>(capacity_, 1)));
}

std::int64_t HostDevice::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() -
         t0_;
}

void HostDevice::prepare(const sim::Workload& workload, const sim::Program& program) {
  synchronize();
  workload_ = &workload;
  program_ = &program;
  executor_ = std::make_unique<OpExecutor>(workload);
  kernel_failed_ = false;
  arena_.reset(capacity_);
  offset_.assign(program.buffers.size(), -1);
  live_ = 0;
  peak_ = 0;
  events_.clear();
  for (std::size_t e = 0; e < program.events.size(); ++e) {
    events_.push_back(std::make_unique<EventState>());
  }
  host_store_.assign(program.host_slots.size(), {});
  spill_.assign(program.buffers.size(), {});
  spilled_bytes_ = 0;
  captured_.clear();
  spans_.clear();
  t0_ = 0;
  t0_ = now_ns();
  for (auto& w : workers_) w->hold();
}

void HostDevice::set_initial_bytes(const sim::Workload& workload, sim::TensorId t,
                                   std::vector<std::byte> bytes) {
  const sim::Tensor& tensor = workload.tensor(t);
  if (!sim::is_preexisting(tensor.kind) || static_cast<sim::Bytes>(bytes.size()) != tensor.bytes) {
    throw std::invalid_argument("set_initial_bytes: tensor '" + tensor.name +
                                "' is not a pre-existing tensor of " +
                                std::to_string(bytes.size()) + " bytes");
  }
  synchronize();  // no run reads the old values any more
  initial_bytes_[t] = std::move(bytes);
}

std::byte* HostDevice::data(sim::BufferId b) const {
  const auto offset = offset_[static_cast<std::size_t>(b)];
  MEMPLAN_CHECK(offset >= 0, "a buffer is used only while allocated");
  return memory_ + offset;
}

bool HostDevice::allocate(sim::BufferId buffer) {
  const auto b = static_cast<std::size_t>(buffer);
  const sim::Buffer& buf = program_->buffers[b];
  const auto offset = arena_.allocate(buf.bytes);
  if (!offset) return false;
  MEMPLAN_CHECK(*offset + buf.bytes <= capacity_, "the arena stays within its capacity");
  offset_[b] = *offset;
  live_ += buf.bytes;
  peak_ = std::max(peak_, live_);
  if (buf.role == sim::BufferRole::kTensor && sim::is_preexisting(buf.kind)) initialise(buffer);
  return true;
}

void HostDevice::initialise(sim::BufferId buffer) {
  const sim::Buffer& buf = program_->buffers[static_cast<std::size_t>(buffer)];
  const sim::Tensor& t = workload_->tensor(buf.tensor);
  if (t.kind != sim::TensorKind::kOptimizerState && !t.dtype.empty() && t.dtype != "float32" &&
      t.dtype != "int64") {
    throw std::runtime_error("tensor '" + t.name + "': no initial data for dtype " + t.dtype);
  }
  std::byte* p = data(buffer);
  if (const auto given = initial_bytes_.find(t.id); given != initial_bytes_.end()) {
    const std::vector<std::byte>* bytes = &given->second;
    worker(sim::StreamId::kCompute).enqueue([bytes, p] {
      std::memcpy(p, bytes->data(), bytes->size());
    });
    return;
  }
  worker(sim::StreamId::kCompute).enqueue([this, &t, p] {
    fill_initial_data(*workload_, t, seed_, p);
  });
}

void HostDevice::free(sim::BufferId buffer) {
  const auto b = static_cast<std::size_t>(buffer);
  MEMPLAN_CHECK(offset_[b] >= 0, "a buffer is freed only while allocated");
  // Stream-ordered: later work that reuses these bytes is enqueued after every use of them on
  // the compute stream, and copy streams' uses are fenced by events before the free.
  arena_.release(offset_[b]);
  offset_[b] = -1;
  live_ -= program_->buffers[b].bytes;
}

void HostDevice::add_span(sim::StreamId stream, std::int32_t index, std::int64_t start,
                          std::int64_t end) {
  const std::lock_guard lock(spans_mutex_);
  spans_.push_back({stream, index, start, end});
}

void HostDevice::enqueue_kernel(std::int32_t index) {
  const sim::Instruction& in =
      program_->stream(sim::StreamId::kCompute)[static_cast<std::size_t>(index)];
  if (in.kind == sim::InstrKind::kEncode || in.kind == sim::InstrKind::kDecode) {
    enqueue_codec(index, in);
    return;
  }
  std::vector<void*> operands;
  operands.reserve(static_cast<std::size_t>(in.operand_count));
  for (std::int32_t k = 0; k < in.operand_count; ++k) {
    operands.push_back(data(program_->operands[static_cast<std::size_t>(in.operands_begin + k)]));
  }
  const sim::Op& op = workload_->op(in.op);
  // Values a kRun writes for gradients and the loss are kept for comparisons between runs.
  std::vector<std::pair<sim::TensorId, void*>> capture;
  if (capture_ && in.kind == sim::InstrKind::kRun) {
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      const sim::Tensor& t = workload_->tensor(op.outputs[o]);
      if (t.kind == sim::TensorKind::kGradient || op.layer == "softmax_cross_entropy") {
        capture.emplace_back(t.id, operands[op.inputs.size() + o]);
      }
    }
  }
  worker(sim::StreamId::kCompute)
      .enqueue([this, &op, index, operands = std::move(operands), capture = std::move(capture)] {
        // After a kernel failed, later kernels would read what it did not write: skip them (the
        // stream's records still happen, so the run ends and synchronize reports the error).
        if (kernel_failed_) return;
        const std::int64_t start = now_ns();
        try {
          executor_->run(op, operands);
        } catch (...) {
          kernel_failed_ = true;
          throw;
        }
        const std::int64_t end = now_ns();
        add_span(sim::StreamId::kCompute, index, start, end);
        for (const auto& [t, p] : capture) {
          const auto bytes = static_cast<std::size_t>(workload_->tensor(t).bytes);
          std::vector<std::byte> copy(bytes);
          std::memcpy(copy.data(), p, bytes);
          const std::lock_guard lock(spans_mutex_);
          captured_[t] = std::move(copy);
        }
      });
}

void HostDevice::enqueue_codec(std::int32_t index, const sim::Instruction& in) {
  const sim::Buffer& full = program_->buffers[static_cast<std::size_t>(in.buffer)];
  const sim::Buffer& packed = program_->buffers[static_cast<std::size_t>(in.aux)];
  const sim::Tensor& t = workload_->tensor(full.tensor);
  if (!t.dtype.empty() && t.dtype != "float32") {
    throw std::runtime_error("host device: cannot encode '" + t.name + "' of dtype " + t.dtype);
  }
  const std::int64_t n = full.bytes / 4;
  auto* x = reinterpret_cast<float*>(data(in.buffer));
  auto* bytes = reinterpret_cast<std::uint8_t*>(data(in.aux));
  const sim::Encoding encoding = packed.encoding;
  const sim::Bytes capacity = packed.bytes;
  const sim::Bytes needed = encoding == sim::Encoding::kBinarize ? binarize_bytes(n)
                            : encoding == sim::Encoding::kFp16   ? narrow_bytes(kFp16, n)
                            : encoding == sim::Encoding::kFp10   ? narrow_bytes(kFp10, n)
                            : encoding == sim::Encoding::kFp8    ? narrow_bytes(kFp8, n)
                                                                 : 0;
  if (needed > capacity) {
    throw std::runtime_error("encode '" + t.name + "': " + std::to_string(needed) +
                             " bytes needed, the plan's buffer has " + std::to_string(capacity));
  }
  const bool encode = in.kind == sim::InstrKind::kEncode;
  std::vector<std::uint8_t>* spill = &spill_[static_cast<std::size_t>(in.aux)];
  worker(sim::StreamId::kCompute)
      .enqueue([this, index, n, x, bytes, encoding, capacity, encode, spill] {
        const std::int64_t start = now_ns();
        switch (encoding) {
          case sim::Encoding::kBinarize:
            if (encode) {
              binarize_encode(n, x, bytes);
            } else {
              binarize_decode(n, bytes, x);
            }
            break;
          case sim::Encoding::kSparse:
            if (encode) {
              sparse_encode_spilling(n, x, bytes, capacity, *spill);
              spilled_bytes_ += static_cast<sim::Bytes>(spill->size());
            } else {
              sparse_decode_spilled(n, bytes, capacity, *spill, x);
            }
            break;
          case sim::Encoding::kFp16:
          case sim::Encoding::kFp10:
          case sim::Encoding::kFp8: {
            const NarrowFloat f = encoding == sim::Encoding::kFp16   ? kFp16
                                  : encoding == sim::Encoding::kFp10 ? kFp10
                                                                     : kFp8;
            if (encode) {
              narrow_encode(f, n, x, bytes);
            } else {
              narrow_decode(f, n, bytes, x);
            }
            break;
          }
          case sim::Encoding::kNone:
            throw std::runtime_error("an encoded buffer without an encoding");
        }
        add_span(sim::StreamId::kCompute, index, start, now_ns());
      });
}

void HostDevice::enqueue_copy(sim::StreamId stream, std::int32_t index) {
  const sim::Instruction& in = program_->stream(stream)[static_cast<std::size_t>(index)];
  const auto slot = static_cast<std::size_t>(in.aux);
  const auto bytes = static_cast<std::size_t>(program_->host_slots[slot].bytes);
  std::byte* device = data(in.buffer);
  std::vector<std::byte>* host = &host_store_[slot];
  if (in.kind == sim::InstrKind::kCopyOut) {
    MEMPLAN_CHECK(stream == sim::StreamId::kD2H, "copy-outs run on the d2h stream");
    worker(stream).enqueue([this, stream, index, device, host, bytes] {
      const std::int64_t start = now_ns();
      host->assign(device, device + bytes);
      add_span(stream, index, start, now_ns());
    });
  } else {
    MEMPLAN_CHECK(stream == sim::StreamId::kH2D && in.kind == sim::InstrKind::kCopyIn,
                  "copy-ins run on the h2d stream");
    worker(stream).enqueue([this, stream, index, device, host, bytes] {
      const std::int64_t start = now_ns();
      if (host->size() != bytes) throw std::runtime_error("copy-in of a host slot never written");
      std::memcpy(device, host->data(), bytes);
      host->clear();
      host->shrink_to_fit();
      add_span(stream, index, start, now_ns());
    });
  }
}

void HostDevice::record(sim::StreamId stream, sim::EventId event) {
  EventState* e = events_[static_cast<std::size_t>(event)].get();
  worker(stream).enqueue([e] {
    {
      const std::lock_guard lock(e->mutex);
      e->done = true;
    }
    e->cv.notify_all();
  });
}

void HostDevice::wait(sim::StreamId stream, sim::EventId event) {
  EventState* e = events_[static_cast<std::size_t>(event)].get();
  worker(stream).enqueue([e] {
    std::unique_lock lock(e->mutex);
    e->cv.wait(lock, [e] { return e->done; });
  });
}

void HostDevice::synchronize() {
  for (auto& w : workers_) w->release();  // all streams first: they may wait on each other
  std::exception_ptr first;
  for (auto& w : workers_) {
    try {
      w->drain();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::vector<sim::Span> HostDevice::measured_spans() const {
  const std::lock_guard lock(spans_mutex_);
  return spans_;
}

runtime::MemoryStats HostDevice::memory_stats() const {
  runtime::MemoryStats s;
  s.peak_bytes = peak_;
  s.peak_reserved_bytes = arena_.peak_reserved_bytes();
  s.capacity_bytes = capacity_;
  s.live_bytes = live_;
  s.largest_free_block = arena_.largest_free_block();
  return s;
}

std::vector<std::byte> HostDevice::tensor_bytes(sim::TensorId t) const {
  {
    const std::lock_guard lock(spans_mutex_);
    if (const auto it = captured_.find(t); it != captured_.end()) return it->second;
  }
  if (program_ == nullptr) return {};
  for (std::size_t b = 0; b < program_->buffers.size(); ++b) {
    const sim::Buffer& buf = program_->buffers[b];
    if (buf.tensor == t && buf.role == sim::BufferRole::kTensor && offset_[b] >= 0) {
      const std::byte* p = data(static_cast<sim::BufferId>(b));
      return {p, p + buf.bytes};
    }
  }
  return {};
}

}  // namespace memplan::host_backend
