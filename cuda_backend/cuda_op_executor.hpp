#pragma once
// CudaOpExecutor: runs one trace op on the GPU, on the compute stream, by a kernel table keyed by
// the op's layer (core/layer.hpp) and phase with operands decoded by runtime::OpCall, following the
// trace conventions exactly as host_backend::OpExecutor does (traces/FORMAT.md): forward ops read
// inputs then weights; backward ops read the output gradient first, then the saved tensors, and
// write the gradients of their differentiable inputs ([dx,] dw [, db] for linear and convolution);
// `add` sums its inputs (forward, and gradient accumulation in backward); `sgd` reads params, grads
// and momentum buffers (three equal groups) and updates params and momentum in place; `adam` reads
// params, grads, exp_avgs and exp_avg_sqs (four equal groups) and updates params and both states
// in place, with the scalars runtime::adam_step rounds on the host. The table's entries are in one
// file per family (cuda_ops.hpp).
//
// Convolutions (conv2d, conv3d) and batch-norm, ReLU, average pooling and softmax use cuDNN;
// linear uses cuBLAS (row-major tensors seen as their column-major transposes); add, max pooling
// 2-d and 3-d (PyTorch's int64 indices, which cuDNN does not produce), the transformer's layers
// (layer-norm, GELU, embedding, attention scores and context), the loss, SGD, Adam and Gist's
// encodings are this backend's own kernels (kernels.cuh). Arithmetic is IEEE fp32 without TF32
// (cuDNN's FMA math, cuBLAS's pedantic math) so gradients stay close to the host backend's.
//
// Convolution algorithms: find_algorithms() asks cuDNN (cudnnFind*, which times every algorithm;
// its heuristics, cudnnGet*_v7, when Find cannot run) for each convolution of the workload. An op
// then runs with the fastest deterministic algorithm whose workspace fits the workspace buffer the
// Program gave it (a non-deterministic one only when no deterministic one fits), so a plan that
// chose the op's memory-optimal alternative (workspace 0) runs cuDNN's memory-optimal algorithm,
// and the default runs the fastest one the trace's workspace allows. The fastest and the
// memory-optimal algorithm of each op, with their workspaces and times, are reported.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/workload.hpp"

namespace memplan::cuda_backend {

/// One cuDNN algorithm as cudnnFind measured it.
struct FoundAlgorithm {
  int algorithm = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  std::size_t workspace_bytes = 0;
  float time_ms = 0;  // as cudnnFind measured it; negative when cuDNN's heuristics ranked it
  /// Same inputs, same bits. Runs prefer these (two runs of a step, a plan and its in-core
  /// reference, then compute the same gradients).
  bool deterministic = true;
};

/// What cudnnFind reported for one convolution op: per pass (forward; or backward data and
/// backward filter) the algorithms that ran, fastest first. The figures below count only the
/// deterministic ones when a pass has any.
struct ConvAlgorithms {
  std::vector<FoundAlgorithm> forward;
  std::vector<FoundAlgorithm> backward_data;
  std::vector<FoundAlgorithm> backward_filter;
  /// Fastest (first) and memory-optimal (least workspace, then fastest) over the op's passes:
  /// workspace is the largest of its passes, time their sum.
  [[nodiscard]] sim::Bytes fastest_workspace() const;
  [[nodiscard]] double fastest_ms() const;
  [[nodiscard]] sim::Bytes memory_optimal_workspace() const;
  [[nodiscard]] double memory_optimal_ms() const;
};

/// Algorithms found per workload (by algorithm_cache_key) and op. Devices of one CudaBackend
/// share it, so a plan and its in-core reference run each op with the same algorithm.
using ConvAlgorithmCache = std::map<std::uint64_t, std::map<sim::OpId, ConvAlgorithms>>;

/// sim::workload_fingerprint of `workload` with every op's workspace set to 0: cuDNN's algorithms
/// depend on the ops, not on the workspace a trace gives them, so a trace that `memplan record`
/// rewrote with cuDNN's workspaces runs with the search made for the model it came from.
std::uint64_t algorithm_cache_key(const sim::Workload& workload);

class CudaOpExecutor {
 public:
  /// Runs on `stream` (the device's compute stream); found algorithms go to and come from
  /// `cache` (a fresh one when null).
  CudaOpExecutor(const sim::Workload& workload, cudaStream_t stream,
                 std::shared_ptr<ConvAlgorithmCache> cache = nullptr);
  CudaOpExecutor(const CudaOpExecutor&) = delete;
  CudaOpExecutor& operator=(const CudaOpExecutor&) = delete;
  ~CudaOpExecutor();

  /// Runs cudnnFind for every convolution op not searched yet (synchronous; call before a run).
  void find_algorithms();
  [[nodiscard]] const std::map<sim::OpId, ConvAlgorithms>& conv_algorithms() const {
    return *conv_;
  }

  /// Enqueues `op` with device pointers in the Program's order: inputs, outputs, then the
  /// workspace buffer (of `workspace_bytes`) when there is one, by the kernel table's entry for
  /// its layer and phase. Throws sim::InputError naming the op when there is none (a generic op),
  /// runtime::BackendError (CudaError) for shapes it cannot use or a failed call.
  void run(const sim::Op& op, std::span<void* const> operands, sim::Bytes workspace_bytes);

  /// What cudnnFind found for convolution op `op`, searched now when not yet.
  const ConvAlgorithms& algorithms_of(const sim::Op& op);

  /// Device scratch of at least `bytes`, owned by the executor (outside the arena, like the host
  /// executor's im2col columns); growing it synchronizes the device.
  void* scratch(std::size_t bytes);

 private:
  void find_for(const sim::Op& op);

  const sim::Workload& w_;
  cudaStream_t stream_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<ConvAlgorithmCache> cache_;
  std::map<sim::OpId, ConvAlgorithms>* conv_;  // this workload's entry of cache_
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace memplan::cuda_backend
