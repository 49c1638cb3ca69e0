#pragma once
// CudaBackend: the runtime::Backend of a CUDA GPU, what `memplan validate --backend cuda` and
// `memplan record --backend cuda` run on. Its devices are CudaDevices on device 0 sharing one
// cache of cuDNN's found algorithms (so a plan and its in-core reference run each convolution
// with the same algorithm, and a recorded trace carries what it found); its link is measured
// with timed pinned copies. make_cuda_backend() is what the CLI calls: with no device it throws
// one InputError naming the reason. The GPU's gradients against the host backend's are
// runtime::compare_backends (the CLI passes both backends).
#include <cstdint>
#include <map>
#include <memory>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "cuda_backend/cuda_op_executor.hpp"
#include "runtime/backend.hpp"

namespace memplan::cuda_backend {

class CudaBackend final : public runtime::Backend {
 public:
  CudaBackend();
  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] std::unique_ptr<runtime::Device> make_device(
      sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator) const override;
  /// Bandwidth of each direction fitted to CUDA-event timed pinned copies of 4 KiB (median of 21)
  /// and 64 MiB (median of 5); latency = the larger intercept of the two fits.
  [[nodiscard]] sim::Link measure_link() const override;
  /// cuDNN's search (cudnnFind*, which times every algorithm) for each convolution op, on the
  /// default stream before any arena exists, kept in the cache the devices share (so the recorded
  /// run uses what was found). Per op: the fastest and the memory-optimal deterministic algorithm
  /// (over its passes: the largest workspace, the summed time); times are 0 where cuDNN could only
  /// rank the algorithms (its heuristics, when Find could not allocate its buffers).
  [[nodiscard]] std::map<sim::OpId, runtime::FoundAlgorithms> find_algorithms(
      const sim::Workload& workload) const override;

 private:
  std::shared_ptr<ConvAlgorithmCache> algorithms_;
};

/// Throws sim::InputError("--backend cuda", "no CUDA device: <reason>") when the process sees no
/// CUDA device (no driver, no GPU, or CUDA_VISIBLE_DEVICES hiding them all).
void require_cuda_device();
/// require_cuda_device(), then the backend.
std::unique_ptr<runtime::Backend> make_cuda_backend();

/// One CUDA kernel's output against the host kernel's on the same operands, element-wise:
/// |gpu - host| <= kAbsoluteTolerance + kRelativeTolerance * |host| (cuDNN and cuBLAS sum in other
/// orders than the host's loops). What tests/cuda_backend/cuda_layers_test.cpp holds each layer
/// to; whole steps are compared norm-wise (runtime::cross_backend_tolerance).
inline constexpr double kAbsoluteTolerance = 1e-5;
inline constexpr double kRelativeTolerance = 1e-3;

}  // namespace memplan::cuda_backend
