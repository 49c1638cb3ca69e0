#include <catch2/catch.hpp>

#include "cuda_backend/cuda_environment.hpp"

using namespace memplan::cuda_backend;

TEST_CASE("cuDNN and the CUDA runtime are linked and report their versions", "[cuda_backend]") {
  const CudaEnvironment env = probe_cuda();
  CHECK(env.cudnn_version >= 90000);  // cuDNN 9
  if (env.device_count == 0) CHECK_FALSE(env.unavailable_reason.empty());
}

TEST_CASE("a CUDA device reports its name and memory", "[cuda]") {
  const CudaEnvironment env = probe_cuda();
  if (env.device_count == 0) {
    WARN("skipped: no CUDA device (" << env.unavailable_reason << ")");
    return;
  }
  CHECK_FALSE(env.device_name.empty());
  CHECK(env.device_memory_bytes > 0);
  CHECK(env.compute_capability_major >= 7);
}
