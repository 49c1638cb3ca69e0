#pragma once
// Check macros for every CUDA runtime, cuDNN and cuBLAS call. MEMPLAN_*_CHECK throws CudaError
// carrying the call as written, the library's error string and the place (file:line of the
// macro). MEMPLAN_*_REPORT is for destructors and cleanup paths, which must not throw: it prints
// the same line to stderr and carries on. A kernel launch is checked at its call site:
// kernels::* return cudaGetLastError() of their launches, and the caller wraps them in
// MEMPLAN_CUDA_CHECK (so the place named is the caller's, not a line of a *_kernels.cu).
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "runtime/backend_error.hpp"

namespace memplan::cuda_backend {

class CudaError : public runtime::BackendError {
 public:
  using runtime::BackendError::BackendError;
};

/// "<library> call <call> failed: <error> (<file>:<line>)".
std::string cuda_error_message(const char* library, const char* call, const char* error,
                               const char* file, int line);
[[noreturn]] void throw_cuda_error(const char* library, const char* call, const char* error,
                                   const char* file, int line);
/// Prints "memplan: " + cuda_error_message(...) as one line to stderr; never throws.
void report_cuda_error(const char* library, const char* call, const char* error, const char* file,
                       int line) noexcept;

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

// The non-throwing variants, for destructors and cleanup.
#define MEMPLAN_CUDA_REPORT(call)                                                  \
  do {                                                                             \
    const cudaError_t memplan_status_ = (call);                                    \
    if (memplan_status_ != cudaSuccess)                                            \
      ::memplan::cuda_backend::report_cuda_error(                                  \
          "CUDA", #call, cudaGetErrorString(memplan_status_), __FILE__, __LINE__); \
  } while (false)

#define MEMPLAN_CUDNN_REPORT(call)                                                   \
  do {                                                                               \
    const cudnnStatus_t memplan_status_ = (call);                                    \
    if (memplan_status_ != CUDNN_STATUS_SUCCESS)                                     \
      ::memplan::cuda_backend::report_cuda_error(                                    \
          "cuDNN", #call, cudnnGetErrorString(memplan_status_), __FILE__, __LINE__); \
  } while (false)

#define MEMPLAN_CUBLAS_REPORT(call)                                                        \
  do {                                                                                     \
    const cublasStatus_t memplan_status_ = (call);                                         \
    if (memplan_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::memplan::cuda_backend::report_cuda_error(                                          \
          "cuBLAS", #call, ::memplan::cuda_backend::cublas_status_string(memplan_status_), \
          __FILE__, __LINE__);                                                             \
  } while (false)

/// Resets the CUDA runtime's last error after a failure the caller has handled (`handled`: the
/// error it expects to find there). Any other error is reported (not thrown: the caller goes on,
/// and a sticky error, which cudaGetLastError cannot clear, fails the next checked call).
#define MEMPLAN_CUDA_CLEAR_ERROR(handled)                                                         \
  do {                                                                                            \
    const cudaError_t memplan_status_ = cudaGetLastError();                                       \
    if (memplan_status_ != cudaSuccess && memplan_status_ != (handled))                           \
      ::memplan::cuda_backend::report_cuda_error(                                                 \
          "CUDA", "cudaGetLastError()", cudaGetErrorString(memplan_status_), __FILE__, __LINE__); \
  } while (false)
