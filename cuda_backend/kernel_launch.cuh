#pragma once
// What the kernel files (layer_kernels.cu, transformer_kernels.cu, optimizer_kernels.cu,
// encoding_kernels.cu) share to launch kernels.cuh's kernels: the block size, a grid of at most
// 65535 blocks over n items with a grid-stride loop in each kernel, and the early return of a
// wrapper that launches several kernels when one fails to launch. Internal to cuda_backend/, and
// C++17 like kernels.cuh (nvcc builds its includers).
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

namespace memplan::cuda_backend::kernels {

inline constexpr int kThreads = 256;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 65535)));
}

}  // namespace memplan::cuda_backend::kernels

#define MEMPLAN_GRID_STRIDE(i, n)                                                                  \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

/// The launch error (bad configuration, no device, ...) of the last launch, or of an earlier one
/// of a wrapper that launches several kernels: the first failure returns at once.
#define MEMPLAN_RETURN_IF_LAUNCH_FAILED()                       \
  do {                                                          \
    const cudaError_t memplan_launch_ = cudaGetLastError();     \
    if (memplan_launch_ != cudaSuccess) return memplan_launch_; \
  } while (false)
