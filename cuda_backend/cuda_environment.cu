#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_environment.hpp"

#include <cstdio>
#include <string>

namespace memplan::cuda_backend {

std::string cuda_error_message(const char* library, const char* call, const char* error,
                               const char* file, int line) {
  return std::string(library) + " call " + call + " failed: " + error + " (" + file + ":" +
         std::to_string(line) + ")";
}

void throw_cuda_error(const char* library, const char* call, const char* error, const char* file,
                      int line) {
  throw CudaError(cuda_error_message(library, call, error, file, line));
}

void report_cuda_error(const char* library, const char* call, const char* error, const char* file,
                       int line) noexcept {
  // fprintf, not the message's std::string: a failed allocation must not escape a destructor.
  std::fprintf(stderr, "memplan: %s call %s failed: %s (%s:%d)\n", library, call, error, file,
               line);
}

const char* cublas_status_string(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

CudaEnvironment probe_cuda() {
  CudaEnvironment env;
  env.cudnn_version = cudnnGetVersion();
  // Checked, not thrown: like cudaGetDeviceCount below, it may fail because there is no driver or
  // device, which probe_cuda reports in unavailable_reason instead.
  if (cudaRuntimeGetVersion(&env.runtime_version) != cudaSuccess) env.runtime_version = 0;
  const cudaError_t status = cudaGetDeviceCount(&env.device_count);
  if (status != cudaSuccess) {
    env.device_count = 0;
    env.unavailable_reason = cudaGetErrorString(status);
    MEMPLAN_CUDA_CLEAR_ERROR(status);  // so that later calls start clean
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
