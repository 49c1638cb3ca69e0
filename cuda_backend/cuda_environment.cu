#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_environment.hpp"

#include <string>

namespace memplan::cuda_backend {

void throw_cuda_error(const char* library, const char* call, const char* error, const char* file,
                      int line) {
  throw CudaError(std::string(library) + " call " + call + " failed: " + error + " (" + file + ":" +
                  std::to_string(line) + ")");
}

const char* cublas_status_string(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

CudaEnvironment probe_cuda() {
  CudaEnvironment env;
  env.cudnn_version = cudnnGetVersion();
  cudaRuntimeGetVersion(&env.runtime_version);
  const cudaError_t status = cudaGetDeviceCount(&env.device_count);
  if (status != cudaSuccess) {
    env.device_count = 0;
    env.unavailable_reason = cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return env;
  }
  if (env.device_count == 0) {
    env.unavailable_reason = "the driver reports no CUDA device";
    return env;
  }
  cudaDeviceProp prop{};
  MEMPLAN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  env.device_name = prop.name;
  env.device_memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  env.compute_capability_major = prop.major;
  env.compute_capability_minor = prop.minor;
  return env;
}

}  // namespace memplan::cuda_backend
