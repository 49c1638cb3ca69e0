#pragma once
// What the [cuda] tests share: the skip, with the reason, on a machine without a CUDA device.
#include <catch2/catch.hpp>

#include "cuda_backend/cuda_environment.hpp"

namespace memplan::test {

/// True (and a WARN saying why) when no CUDA device is present: the test returns at once.
inline bool skip_without_device() {
  const cuda_backend::CudaEnvironment env = cuda_backend::probe_cuda();
  if (env.device_count > 0) return false;
  WARN("skipped: no CUDA device (" << env.unavailable_reason << ")");
  return true;
}

}  // namespace memplan::test
