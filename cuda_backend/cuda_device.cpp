#include "cuda_backend/cuda_device.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/check.hpp"
#include "core/plan.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/kernels.cuh"
#include "runtime/backend_error.hpp"
#include "runtime/host_ops.hpp"
#include "runtime/initial_data.hpp"

namespace memplan::cuda_backend {

// ---- PinnedBuffer -------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(std::size_t bytes, unsigned flags) : size_(bytes) {
  void* p = nullptr;
  MEMPLAN_CUDA_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), flags));
  data_ = static_cast<std::byte*>(p);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) MEMPLAN_CUDA_REPORT(cudaFreeHost(data_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) MEMPLAN_CUDA_REPORT(cudaFreeHost(data_));
}

// ---- CudaDevice ---------------------------------------------------------------------------------

CudaDevice::CudaDevice(sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator,
                       std::shared_ptr<ConvAlgorithmCache> algorithms)
    : ArenaDevice(capacity_bytes, seed, allocator),
      algorithms_(algorithms != nullptr ? std::move(algorithms)
                                        : std::make_shared<ConvAlgorithmCache>()) {
  try {
    for (cudaStream_t& s : streams_)
      MEMPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MEMPLAN_CUDA_CHECK(cudaEventCreate(&start_));
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

CudaDevice::~CudaDevice() {
  release();
}

void CudaDevice::release() noexcept {
  // Work still queued (a run that threw midway) must finish before its memory is freed.
  MEMPLAN_CUDA_REPORT(cudaDeviceSynchronize());
  executor_.reset();
  for (cudaEvent_t e : events_) {
    if (e != nullptr) MEMPLAN_CUDA_REPORT(cudaEventDestroy(e));
  }
  for (cudaEvent_t e : timing_) MEMPLAN_CUDA_REPORT(cudaEventDestroy(e));
  if (start_ != nullptr) MEMPLAN_CUDA_REPORT(cudaEventDestroy(start_));
  for (cudaStream_t s : streams_) {
    if (s != nullptr) MEMPLAN_CUDA_REPORT(cudaStreamDestroy(s));
  }
  unmap_all();
}

std::byte* CudaDevice::map_segment(sim::Bytes bytes) {
  const auto length = static_cast<std::size_t>(std::max<sim::Bytes>(bytes, 1));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  MEMPLAN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (length > free_bytes) {
    throw CudaError("cuda device: a " + std::to_string(bytes) +
                    "-byte segment does not fit the GPU's " + std::to_string(free_bytes) +
                    " free bytes (of " + std::to_string(total_bytes) + ")");
  }
  void* p = nullptr;
  MEMPLAN_CUDA_CHECK(cudaMalloc(&p, length));
  return static_cast<std::byte*>(p);
}

void CudaDevice::unmap_segment(std::byte* memory, sim::Bytes /*bytes*/) {
  MEMPLAN_CUDA_REPORT(cudaFree(memory));
}

void CudaDevice::prepare(const sim::Workload& workload, const sim::Program& program) {
  synchronize();
  // Found algorithms and initial data belong to a workload: kept while the workload is the same.
  const std::uint64_t fingerprint = sim::workload_fingerprint(workload);
  if (executor_ == nullptr || prepared_for_ != &workload || fingerprint_ != fingerprint) {
    fingerprint_ = fingerprint;
    executor_ =
        std::make_unique<CudaOpExecutor>(workload, stream(sim::StreamId::kCompute), algorithms_);
    initial_.clear();
  }
  prepared_for_ = &workload;
  begin_run(workload, program);
  // cudnnFind times every convolution algorithm: done before the run, not inside it.
  executor_->find_algorithms();
  for (cudaEvent_t e : events_) {
    if (e != nullptr) MEMPLAN_CUDA_CHECK(cudaEventDestroy(e));
  }
  events_.assign(program.events.size(), nullptr);
  for (cudaEvent_t& e : events_) {
    MEMPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  host_store_.resize(program.host_slots.size());
  for (std::size_t s = 0; s < program.host_slots.size(); ++s) {
    const auto bytes = static_cast<std::size_t>(program.host_slots[s].bytes);
    if (host_store_[s].size() != bytes) host_store_[s] = PinnedBuffer(bytes);
    if (program.host_slots[s].resident) {  // a host-placed tensor's home starts with its data
      runtime::fill_initial_data(workload, workload.tensor(program.host_slots[s].tensor), seed_,
                                 host_store_[s].data());
    }
  }
  host_calls_.clear();
  std::size_t sparse_encodes = 0;
  for (const sim::Instruction& in : program.stream(sim::StreamId::kCompute)) {
    if (in.kind == sim::InstrKind::kEncode &&
        program.buffers[index(in.encoded())].encoding == sim::Encoding::kSparse) {
      ++sparse_encodes;
    }
  }
  if (overflow_.size() < sparse_encodes * sizeof(int)) {
    overflow_ = PinnedBuffer(sparse_encodes * sizeof(int), cudaHostAllocMapped);
  }
  sparse_checks_.clear();
  captured_.clear();
  pending_.clear();
  spans_.clear();
  timing_used_ = 0;
  MEMPLAN_CUDA_CHECK(cudaEventRecord(start_, stream(sim::StreamId::kCompute)));
}

cudaEvent_t CudaDevice::timing_event() {
  if (timing_used_ == timing_.size()) {
    cudaEvent_t e = nullptr;
    MEMPLAN_CUDA_CHECK(cudaEventCreate(&e));
    timing_.push_back(e);
  }
  return timing_[timing_used_++];
}

void CudaDevice::initialise(sim::BufferId buffer, const sim::Tensor& t) {
  const auto bytes = static_cast<std::size_t>(program_->buffers[index(buffer)].bytes);
  cudaStream_t s = stream(sim::StreamId::kCompute);
  if (t.kind == sim::TensorKind::kOptimizerState) {
    MEMPLAN_CUDA_CHECK(cudaMemsetAsync(data(buffer), 0, bytes, s));
    return;
  }
  // runtime::fill_initial_data's values (the host backend's too), filled on the host once per
  // workload (they depend only on the seed and the tensor) and uploaded in compute-stream order.
  auto it = initial_.find(t.id);
  if (it == initial_.end()) {
    it = initial_.emplace(t.id, PinnedBuffer(std::max(bytes, static_cast<std::size_t>(t.bytes))))
             .first;
    runtime::fill_initial_data(*workload_, t, seed_, it->second.data());
  }
  MEMPLAN_CUDA_CHECK(
      cudaMemcpyAsync(data(buffer), it->second.data(), bytes, cudaMemcpyHostToDevice, s));
}

void CudaDevice::enqueue_kernel(std::int32_t position) {
  const sim::Instruction& in =
      program_->stream(sim::StreamId::kCompute)[static_cast<std::size_t>(position)];
  if (in.kind == sim::InstrKind::kEncode || in.kind == sim::InstrKind::kDecode) {
    enqueue_codec(position, in);
    return;
  }
  std::vector<void*> operands;
  operands.reserve(static_cast<std::size_t>(in.operand_count));
  sim::Bytes workspace_bytes = 0;
  for (std::int32_t k = 0; k < in.operand_count; ++k) {
    const sim::BufferId b = program_->operand_buffer(in, k);
    operands.push_back(data(b));
    const sim::Buffer& buf = program_->buffers[index(b)];
    if (buf.role == sim::BufferRole::kWorkspace) workspace_bytes = buf.bytes;
  }
  const sim::Op& op = workload_->op(in.op);
  cudaStream_t s = stream(sim::StreamId::kCompute);
  const cudaEvent_t start = timing_event();
  const cudaEvent_t end = timing_event();
  MEMPLAN_CUDA_CHECK(cudaEventRecord(start, s));
  executor_->run(op, operands, workspace_bytes);
  MEMPLAN_CUDA_CHECK(cudaEventRecord(end, s));
  pending_.push_back({sim::StreamId::kCompute, position, start, end});
  // Values a kRun writes for gradients and the loss are kept for comparisons between runs.
  if (in.kind == sim::InstrKind::kRun) {
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      if (!captures(op, o)) continue;
      const sim::Tensor& t = workload_->tensor(op.outputs[o]);
      const auto bytes = static_cast<std::size_t>(t.bytes);
      PinnedBuffer& copy = captured_[t.id];
      if (copy.size() != bytes) copy = PinnedBuffer(bytes);
      MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(copy.data(), operands[op.inputs.size() + o], bytes,
                                         cudaMemcpyDeviceToHost, s));
    }
  }
}

void CudaDevice::enqueue_codec(std::int32_t position, const sim::Instruction& in) {
  const Codec c = codec(in);
  const std::int64_t n = c.values;
  auto* x = reinterpret_cast<float*>(data(in.buffer));
  auto* bytes = reinterpret_cast<std::uint8_t*>(data(in.encoded()));
  cudaStream_t s = stream(sim::StreamId::kCompute);
  // Scratch before the start event: growing it synchronizes the device.
  void* scratch =
      c.encoding == sim::Encoding::kSparse
          ? executor_->scratch(static_cast<std::size_t>(kernels::sparse_scratch_bytes(n)))
          : nullptr;
  const cudaEvent_t start = timing_event();
  const cudaEvent_t end = timing_event();
  MEMPLAN_CUDA_CHECK(cudaEventRecord(start, s));
  if (c.encoding == sim::Encoding::kBinarize) {
    MEMPLAN_CUDA_CHECK(c.encode ? kernels::binarize_encode(s, n, x, bytes)
                                : kernels::binarize_decode(s, n, bytes, x));
  } else if (c.encoding == sim::Encoding::kSparse && c.encode) {
    const std::size_t flag = sparse_checks_.size();
    sparse_checks_.push_back({c.tensor.name, flag});
    int* host_flag = reinterpret_cast<int*>(overflow_.data()) + flag;
    void* device_flag = nullptr;
    MEMPLAN_CUDA_CHECK(cudaHostGetDevicePointer(&device_flag, host_flag, 0));
    MEMPLAN_CUDA_CHECK(kernels::sparse_encode(s, n, x, bytes, c.capacity, scratch,
                                              static_cast<int*>(device_flag)));
  } else if (c.encoding == sim::Encoding::kSparse) {
    MEMPLAN_CUDA_CHECK(kernels::sparse_decode(s, n, bytes, x, scratch));
  } else {
    const sim::NarrowFormat f = *sim::narrow_format(c.encoding);  // codec() refused kNone
    MEMPLAN_CUDA_CHECK(
        c.encode ? kernels::narrow_encode(s, f.exponent_bits, f.mantissa_bits, n, x, bytes)
                 : kernels::narrow_decode(s, f.exponent_bits, f.mantissa_bits, n, bytes, x));
  }
  MEMPLAN_CUDA_CHECK(cudaEventRecord(end, s));
  pending_.push_back({sim::StreamId::kCompute, position, start, end});
}

void CudaDevice::enqueue_copy(sim::StreamId stream_id, std::int32_t position) {
  const sim::Instruction& in = program_->stream(stream_id)[static_cast<std::size_t>(position)];
  const auto slot = index(in.slot());
  const auto bytes = static_cast<std::size_t>(program_->host_slots[slot].bytes);
  std::byte* device = data(in.buffer);
  std::byte* host = host_store_[slot].data();
  cudaStream_t s = stream(stream_id);
  const cudaEvent_t start = timing_event();
  const cudaEvent_t end = timing_event();
  MEMPLAN_CUDA_CHECK(cudaEventRecord(start, s));
  if (in.kind == sim::InstrKind::kCopyOut) {
    MEMPLAN_CHECK(stream_id == sim::StreamId::kD2H, "copy-outs run on the d2h stream");
    MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s));
  } else {
    MEMPLAN_CHECK(stream_id == sim::StreamId::kH2D && in.kind == sim::InstrKind::kCopyIn,
                  "copy-ins run on the h2d stream");
    MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s));
  }
  MEMPLAN_CUDA_CHECK(cudaEventRecord(end, s));
  pending_.push_back({stream_id, position, start, end});
}

void CudaDevice::enqueue_host_op(std::int32_t position) {
  const sim::Instruction& in =
      program_->stream(sim::StreamId::kHost)[static_cast<std::size_t>(position)];
  HostCall& call = host_calls_.emplace_back();
  call.workload = workload_;
  call.op = &workload_->op(in.op);
  // Its inputs' slots (the update ops the host runs make no temporaries: run_host_op).
  for (std::int32_t k = 0; k < static_cast<std::int32_t>(call.op->inputs.size()); ++k) {
    const auto slot = index(program_->operand_slot(in, k));
    call.operands.push_back(host_store_[slot].data());
  }
  cudaStream_t s = stream(sim::StreamId::kHost);
  const cudaEvent_t start = timing_event();
  const cudaEvent_t end = timing_event();
  MEMPLAN_CUDA_CHECK(cudaEventRecord(start, s));
  // Runs on a CUDA runtime thread once the host stream gets there: no CUDA call inside.
  MEMPLAN_CUDA_CHECK(cudaLaunchHostFunc(
      s,
      [](void* p) {
        auto* c = static_cast<HostCall*>(p);
        try {
          runtime::run_host_op(*c->workload, *c->op, c->operands);
        } catch (const std::exception& e) {
          c->error = e.what();
        }
      },
      &call));
  MEMPLAN_CUDA_CHECK(cudaEventRecord(end, s));
  pending_.push_back({sim::StreamId::kHost, position, start, end});
}

void CudaDevice::record(sim::StreamId s, sim::EventId event) {
  MEMPLAN_CUDA_CHECK(cudaEventRecord(events_[index(event)], stream(s)));
}

void CudaDevice::wait(sim::StreamId s, sim::EventId event) {
  MEMPLAN_CUDA_CHECK(cudaStreamWaitEvent(stream(s), events_[index(event)], 0));
}

void CudaDevice::synchronize() {
  for (cudaStream_t s : streams_) MEMPLAN_CUDA_CHECK(cudaStreamSynchronize(s));
  for (const PendingSpan& p : pending_) {
    float start_ms = 0;
    float end_ms = 0;
    MEMPLAN_CUDA_CHECK(cudaEventElapsedTime(&start_ms, start_, p.start));
    MEMPLAN_CUDA_CHECK(cudaEventElapsedTime(&end_ms, start_, p.end));
    spans_.push_back({p.stream, p.index, static_cast<sim::Nanoseconds>(start_ms * 1e6),
                      static_cast<sim::Nanoseconds>(end_ms * 1e6)});
  }
  pending_.clear();
  for (const HostCall& call : host_calls_) {
    if (!call.error.empty()) throw runtime::BackendError(call.error);
  }
  const auto* flags = reinterpret_cast<const int*>(overflow_.data());
  for (const SparseCheck& c : std::exchange(sparse_checks_, {})) {
    if (flags[c.flag] != 0) {
      throw runtime::BackendError("encode:sparse of '" + c.tensor +
                                  "': the map has more non-zeros than its buffer holds");
    }
  }
}

std::vector<sim::Span> CudaDevice::measured_spans() const {
  return spans_;
}

std::vector<std::byte> CudaDevice::tensor_bytes(sim::TensorId t) const {
  if (const auto it = captured_.find(t); it != captured_.end()) {
    return {it->second.data(), it->second.data() + it->second.size()};
  }
  const auto b = resident_buffer(t);
  if (!b) {
    const auto slot = resident_slot(t);  // a host-placed tensor's home
    if (!slot) return {};
    const PinnedBuffer& host = host_store_[static_cast<std::size_t>(*slot)];
    return {host.data(), host.data() + host.size()};
  }
  std::vector<std::byte> out(
      static_cast<std::size_t>(program_->buffers[static_cast<std::size_t>(*b)].bytes));
  MEMPLAN_CUDA_CHECK(cudaMemcpy(out.data(), data(*b), out.size(), cudaMemcpyDeviceToHost));
  return out;
}

const std::map<sim::OpId, ConvAlgorithms>& CudaDevice::conv_algorithms() const {
  static const std::map<sim::OpId, ConvAlgorithms> kNone;
  return executor_ != nullptr ? executor_->conv_algorithms() : kNone;
}

}  // namespace memplan::cuda_backend
