#include "host_backend/host_device.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "core/check.hpp"
#include "host_backend/encodings.hpp"
#include "runtime/backend_error.hpp"
#include "runtime/host_ops.hpp"
#include "runtime/initial_data.hpp"

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

HostDevice::HostDevice(sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator)
    : ArenaDevice(capacity_bytes, seed, allocator) {
  for (int s = 0; s < sim::kFixedStreamCount; ++s)
    workers_.push_back(std::make_unique<StreamWorker>());
}

std::byte* HostDevice::map_segment(sim::Bytes bytes) {
  const auto length = static_cast<std::size_t>(std::max<sim::Bytes>(bytes, 1));
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw runtime::BackendError("host device: cannot map " + std::to_string(bytes) +
                                " bytes of device memory");
  }
  return static_cast<std::byte*>(p);
}

void HostDevice::unmap_segment(std::byte* memory, sim::Bytes bytes) {
  const auto length = static_cast<std::size_t>(std::max<sim::Bytes>(bytes, 1));
  worker(sim::StreamId::kCompute).enqueue([memory, length] { munmap(memory, length); });
}

HostDevice::~HostDevice() {
  // Drained twice: the work left, then the unmapping of every segment, queued behind it.
  for (int round = 0; round < 2; ++round) {
    for (auto& w : workers_) w->release();  // all streams first: they may wait on each other
    for (auto& w : workers_) {
      try {
        w->drain();
      } catch (...) {  // NOLINT(bugprone-empty-catch): errors were reported by synchronize
      }
    }
    if (round == 0) unmap_all();
  }
  workers_.clear();
}

std::int64_t HostDevice::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() -
         t0_;
}

void HostDevice::prepare(const sim::Workload& workload, const sim::Program& program) {
  synchronize();
  begin_run(workload, program);
  executor_ = std::make_unique<OpExecutor>(workload);
  kernel_failed_ = false;
  events_.clear();
  for (std::size_t e = 0; e < program.events.size(); ++e) {
    events_.push_back(std::make_unique<EventState>());
  }
  host_store_.assign(program.host_slots.size(), {});
  for (std::size_t slot = 0; slot < program.host_slots.size(); ++slot) {
    if (program.host_slots[slot].resident) fill_resident_slot(slot);
  }
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
    throw runtime::BackendError("set_initial_bytes: tensor '" + tensor.name +
                                "' is not a pre-existing tensor of " +
                                std::to_string(bytes.size()) + " bytes");
  }
  synchronize();  // no run reads the old values any more
  initial_bytes_[t] = std::move(bytes);
}

void HostDevice::initialise(sim::BufferId buffer, const sim::Tensor& t) {
  if (t.kind != sim::TensorKind::kOptimizerState && !t.dtype.empty() && t.dtype != "float32" &&
      t.dtype != "int64") {
    throw runtime::BackendError("tensor '" + t.name + "': no initial data for dtype " + t.dtype);
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
    runtime::fill_initial_data(*workload_, t, seed_, p);
  });
}

void HostDevice::fill_resident_slot(std::size_t slot) {
  const sim::Tensor& t = workload_->tensor(program_->host_slots[slot].tensor);
  std::vector<std::byte>& host = host_store_[slot];
  if (const auto given = initial_bytes_.find(t.id); given != initial_bytes_.end()) {
    host = given->second;
    return;
  }
  host.resize(static_cast<std::size_t>(t.bytes));
  runtime::fill_initial_data(*workload_, t, seed_, host.data());
}

void HostDevice::add_span(sim::StreamId stream, std::int32_t index, std::int64_t start,
                          std::int64_t end) {
  const std::lock_guard lock(spans_mutex_);
  spans_.push_back({stream, index, start, end});
}

void HostDevice::enqueue_kernel(std::int32_t position) {
  const sim::Instruction& in =
      program_->stream(sim::StreamId::kCompute)[static_cast<std::size_t>(position)];
  if (in.kind == sim::InstrKind::kEncode || in.kind == sim::InstrKind::kDecode) {
    enqueue_codec(position, in);
    return;
  }
  std::vector<void*> operands;
  operands.reserve(static_cast<std::size_t>(in.operand_count));
  for (std::int32_t k = 0; k < in.operand_count; ++k) {
    operands.push_back(data(program_->operand_buffer(in, k)));
  }
  const sim::Op& op = workload_->op(in.op);
  // Values a kRun writes for gradients and the loss are kept for comparisons between runs.
  std::vector<std::pair<sim::TensorId, void*>> capture;
  if (in.kind == sim::InstrKind::kRun) {
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      if (captures(op, o)) capture.emplace_back(op.outputs[o], operands[op.inputs.size() + o]);
    }
  }
  worker(sim::StreamId::kCompute)
      .enqueue([this, &op, position, operands = std::move(operands), capture = std::move(capture)] {
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
        add_span(sim::StreamId::kCompute, position, start, end);
        for (const auto& [t, p] : capture) {
          const auto bytes = static_cast<std::size_t>(workload_->tensor(t).bytes);
          std::vector<std::byte> copy(bytes);
          std::memcpy(copy.data(), p, bytes);
          const std::lock_guard lock(spans_mutex_);
          captured_[t] = std::move(copy);
        }
      });
}

void HostDevice::enqueue_codec(std::int32_t position, const sim::Instruction& in) {
  const Codec c = codec(in);
  auto* x = reinterpret_cast<float*>(data(in.buffer));
  auto* bytes = reinterpret_cast<std::uint8_t*>(data(in.encoded()));
  std::vector<std::uint8_t>* spill = &spill_[index(in.encoded())];
  worker(sim::StreamId::kCompute).enqueue([this, position, c, x, bytes, spill] {
    const std::int64_t start = now_ns();
    const std::int64_t n = c.values;
    if (c.encoding == sim::Encoding::kBinarize) {
      if (c.encode) {
        binarize_encode(n, x, bytes);
      } else {
        binarize_decode(n, bytes, x);
      }
    } else if (c.encoding == sim::Encoding::kSparse) {
      if (c.encode) {
        sparse_encode_spilling(n, x, bytes, c.capacity, *spill);
        spilled_bytes_ += static_cast<sim::Bytes>(spill->size());
      } else {
        sparse_decode_spilled(n, bytes, c.capacity, *spill, x);
      }
    } else {
      const NarrowFloat f = *sim::narrow_format(c.encoding);  // codec() refused kNone
      if (c.encode) {
        narrow_encode(f, n, x, bytes);
      } else {
        narrow_decode(f, n, bytes, x);
      }
    }
    add_span(sim::StreamId::kCompute, position, start, now_ns());
  });
}

void HostDevice::enqueue_copy(sim::StreamId stream, std::int32_t position) {
  const sim::Instruction& in = program_->stream(stream)[static_cast<std::size_t>(position)];
  const auto slot = index(in.slot());
  const auto bytes = static_cast<std::size_t>(program_->host_slots[slot].bytes);
  std::byte* device = data(in.buffer);
  std::vector<std::byte>* host = &host_store_[slot];
  const bool resident = program_->host_slots[slot].resident;
  if (in.kind == sim::InstrKind::kCopyOut) {
    MEMPLAN_CHECK(stream == sim::StreamId::kD2H, "copy-outs run on the d2h stream");
    worker(stream).enqueue([this, stream, position, device, host, bytes] {
      const std::int64_t start = now_ns();
      host->assign(device, device + bytes);
      add_span(stream, position, start, now_ns());
    });
  } else {
    MEMPLAN_CHECK(stream == sim::StreamId::kH2D && in.kind == sim::InstrKind::kCopyIn,
                  "copy-ins run on the h2d stream");
    worker(stream).enqueue([this, stream, position, device, host, bytes, resident] {
      const std::int64_t start = now_ns();
      if (host->size() != bytes) {
        throw runtime::BackendError("copy-in of a host slot never written");
      }
      std::memcpy(device, host->data(), bytes);
      if (!resident) {  // a swapped map's slot is done with; a resident one is the tensor's home
        host->clear();
        host->shrink_to_fit();
      }
      add_span(stream, position, start, now_ns());
    });
  }
}

void HostDevice::enqueue_host_op(std::int32_t position) {
  const sim::Instruction& in =
      program_->stream(sim::StreamId::kHost)[static_cast<std::size_t>(position)];
  const sim::Op& op = workload_->op(in.op);
  // Its inputs' slots (the update ops the host runs make no temporaries: run_host_op).
  const auto inputs = static_cast<std::int32_t>(op.inputs.size());
  std::vector<std::size_t> slots;
  slots.reserve(op.inputs.size());
  for (std::int32_t k = 0; k < inputs; ++k) {
    slots.push_back(index(program_->operand_slot(in, k)));
  }
  worker(sim::StreamId::kHost).enqueue([this, &op, position, slots = std::move(slots)] {
    if (kernel_failed_) return;
    const std::int64_t start = now_ns();
    // The slots' storage is taken when the op runs: a gradient's slot is written by its copy-out,
    // which the host stream waited for.
    std::vector<std::byte*> operands;
    operands.reserve(slots.size());
    for (std::size_t slot : slots) {
      if (host_store_[slot].size() != static_cast<std::size_t>(program_->host_slots[slot].bytes)) {
        throw runtime::BackendError("host op '" + op.name + "' reads a host slot never written");
      }
      operands.push_back(host_store_[slot].data());
    }
    runtime::run_host_op(*workload_, op, operands);
    add_span(sim::StreamId::kHost, position, start, now_ns());
  });
}

void HostDevice::record(sim::StreamId stream, sim::EventId event) {
  EventState* e = events_[index(event)].get();
  worker(stream).enqueue([e] {
    {
      const std::lock_guard lock(e->mutex);
      e->done = true;
    }
    e->cv.notify_all();
  });
}

void HostDevice::wait(sim::StreamId stream, sim::EventId event) {
  EventState* e = events_[index(event)].get();
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

std::vector<std::byte> HostDevice::tensor_bytes(sim::TensorId t) const {
  {
    const std::lock_guard lock(spans_mutex_);
    if (const auto it = captured_.find(t); it != captured_.end()) return it->second;
  }
  const auto b = resident_buffer(t);
  if (!b) {
    const auto slot = resident_slot(t);  // a host-placed tensor's home
    if (!slot) return {};
    return host_store_[index(*slot)];
  }
  const std::byte* p = data(*b);
  return {p, p + program_->buffers[index(*b)].bytes};
}

}  // namespace memplan::host_backend
