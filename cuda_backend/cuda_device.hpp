#pragma once
// CudaDevice: the runtime's Device on a GPU. Device memory is one cudaMalloc'd block of the cap's
// size, placed by runtime::ArenaDevice (the simulator's allocator, as for the host backend), so an
// allocation over the cap fails where the simulator says it does, whatever the GPU's real size.
// Four cudaStreams (compute, d2h, h2d, and host, whose host ops run as cudaLaunchHostFunc callbacks
// on pinned host slots); the Program's events are cudaEvents (record/wait); swapped maps and
// host-placed tensors go to pinned host memory (cudaHostAlloc) so that copies are asynchronous DMA.
// Every kernel and copy is bracketed by two timing events and its span is their elapsed time from
// an event recorded at prepare.
//
// Inputs and parameters get runtime::fill_initial_data's values (filled on the host, then
// uploaded), optimizer state zero, so a CUDA run and a host run of the same workload and seed
// start from the same data and weights. Gradients and the loss written by kRun ops are copied
// aside to pinned memory when capture is on; parameters and optimizer state are downloaded after
// the run.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend/cuda_op_executor.hpp"
#include "runtime/arena_device.hpp"

namespace memplan::cuda_backend {

/// Pinned host memory (cudaHostAlloc), freed with cudaFreeHost.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes, unsigned flags = cudaHostAllocDefault);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  [[nodiscard]] std::byte* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

class CudaDevice final : public runtime::ArenaDevice {
 public:
  /// A device with `capacity_bytes` of memory on CUDA device 0, handed out under `allocator`;
  /// data and weights derive from `seed`. Throws CudaError when there is no device; a run throws
  /// it when a segment's memory cannot be allocated. Devices sharing `algorithms` run each
  /// convolution with the same cuDNN algorithm.
  explicit CudaDevice(sim::Bytes capacity_bytes, std::uint64_t seed = 1,
                      sim::AllocatorModel allocator = sim::AllocatorModel::kArena,
                      std::shared_ptr<ConvAlgorithmCache> algorithms = nullptr);
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  ~CudaDevice() override;

  void prepare(const sim::Workload& workload, const sim::Program& program) override;
  void enqueue_kernel(std::int32_t position) override;
  void enqueue_copy(sim::StreamId stream, std::int32_t position) override;
  void enqueue_host_op(std::int32_t position) override;
  void record(sim::StreamId stream, sim::EventId event) override;
  void wait(sim::StreamId stream, sim::EventId event) override;
  void synchronize() override;
  [[nodiscard]] std::vector<sim::Span> measured_spans() const override;

  /// Bytes of tensor `t` as the run left them: the value a kRun wrote for a gradient or the loss
  /// (when captured), else the tensor's resident buffer downloaded. Empty when not available.
  [[nodiscard]] std::vector<std::byte> tensor_bytes(sim::TensorId t) const override;

  /// cuDNN's fastest and memory-optimal algorithms of each convolution op (after a prepare).
  [[nodiscard]] const std::map<sim::OpId, ConvAlgorithms>& conv_algorithms() const;

 private:
  struct PendingSpan {
    sim::StreamId stream;
    std::int32_t index;
    cudaEvent_t start;
    cudaEvent_t end;
  };
  /// A host op as the host stream's callback runs it (runtime::run_host_op on pinned slots).
  struct HostCall {
    const sim::Workload* workload = nullptr;
    const sim::Op* op = nullptr;
    std::vector<std::byte*> operands;
    std::string error;  // set by the callback, thrown by synchronize
  };
  struct SparseCheck {
    std::string tensor;
    std::size_t flag;  // index into overflow_
  };
  [[nodiscard]] cudaStream_t stream(sim::StreamId s) const {
    return streams_[static_cast<std::size_t>(s)];
  }
  cudaEvent_t timing_event();
  /// Waits for queued work, then destroys what the device created (errors reported, not thrown).
  void release() noexcept;
  void initialise(sim::BufferId buffer, const sim::Tensor& t) override;
  /// cudaMalloc, after checking the GPU has the bytes free.
  std::byte* map_segment(sim::Bytes bytes) override;
  /// cudaFree, which waits for the device's queued work as PyTorch's release of cached
  /// segments does.
  void unmap_segment(std::byte* memory, sim::Bytes bytes) override;
  void enqueue_codec(std::int32_t position, const sim::Instruction& in);

  std::shared_ptr<ConvAlgorithmCache> algorithms_;
  const sim::Workload* prepared_for_ = nullptr;  // the workload executor_ and initial_ are for
  std::uint64_t fingerprint_ = 0;
  cudaStream_t streams_[sim::kFixedStreamCount] = {};
  std::unique_ptr<CudaOpExecutor> executor_;
  std::vector<cudaEvent_t> events_;  // the Program's (no timing)
  std::vector<cudaEvent_t> timing_;  // pool of timing events, reused across runs
  std::size_t timing_used_ = 0;
  cudaEvent_t start_ = nullptr;
  std::vector<PendingSpan> pending_;
  std::vector<sim::Span> spans_;
  std::vector<PinnedBuffer> host_store_;           // per host slot
  std::map<sim::TensorId, PinnedBuffer> initial_;  // initial data of the workload, pinned
  std::map<sim::TensorId, PinnedBuffer> captured_;
  PinnedBuffer overflow_;  // int flags of sparse encodes, written by the GPU
  std::vector<SparseCheck> sparse_checks_;
  std::deque<HostCall> host_calls_;  // this run's (stable addresses for the callbacks)
};

}  // namespace memplan::cuda_backend
