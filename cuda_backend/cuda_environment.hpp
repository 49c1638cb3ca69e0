#pragma once
// What CUDA this process can use: whether a device is present (and if not, why), the first
// device's name and memory, and the cuDNN and cuBLAS versions linked in. `--backend cuda` and the
// `[cuda]` tests ask this first, so that a machine without a GPU gets one clear message.
#include <cstdint>
#include <string>

namespace memplan::cuda_backend {

struct CudaEnvironment {
  int device_count = 0;
  std::string unavailable_reason;  // set when device_count == 0
  std::string device_name;
  std::int64_t device_memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  std::size_t cudnn_version = 0;
  int runtime_version = 0;
};

/// Never throws for a missing device or driver: that is reported in `unavailable_reason`.
CudaEnvironment probe_cuda();

}  // namespace memplan::cuda_backend
