#pragma once
// Check macros for every CUDA runtime, cuDNN and cuBLAS call: on failure they throw CudaError
// carrying the call as written, the library's error string and the place.
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace memplan::cuda_backend {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const char* error,
                                   const char* file, int line);

const char* cublas_status_string(cublasStatus_t status);

}  // namespace memplan::cuda_backend

#define MEMPLAN_CUDA_CHECK(call)                                                   \
  do {                                                                             \
    const cudaError_t memplan_status_ = (call);                                    \
    if (memplan_status_ != cudaSuccess)                                            \
      ::memplan::cuda_backend::throw_cuda_error(                                   \
          "CUDA", #call, cudaGetErrorString(memplan_status_), __FILE__, __LINE__); \
  } while (false)

#define MEMPLAN_CUDNN_CHECK(call)                                                    \
  do {                                                                               \
    const cudnnStatus_t memplan_status_ = (call);                                    \
    if (memplan_status_ != CUDNN_STATUS_SUCCESS)                                     \
      ::memplan::cuda_backend::throw_cuda_error(                                     \
          "cuDNN", #call, cudnnGetErrorString(memplan_status_), __FILE__, __LINE__); \
  } while (false)

#define MEMPLAN_CUBLAS_CHECK(call)                                                         \
  do {                                                                                     \
    const cublasStatus_t memplan_status_ = (call);                                         \
    if (memplan_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::memplan::cuda_backend::throw_cuda_error(                                           \
          "cuBLAS", #call, ::memplan::cuda_backend::cublas_status_string(memplan_status_), \
          __FILE__, __LINE__);                                                             \
  } while (false)
