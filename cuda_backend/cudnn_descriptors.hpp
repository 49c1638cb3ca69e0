#pragma once
// What the CUDA executor's kernel-table entries (cuda_ops.hpp) share for their cuDNN calls: the
// int extents cuDNN and cuBLAS take (checked), the scaling factors 1 and 0, and an RAII tensor
// descriptor of a contiguous float tensor. The descriptors that one family alone uses (a
// convolution's, average pooling's, ReLU's) stay in its file (conv_ops.cpp, pooling_ops.cpp,
// layer_ops.cpp). Internal to cuda_backend/.
#include <climits>
#include <cstdint>
#include <vector>

#include <cudnn.h>

#include "core/workload.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend::ops {

inline int as_int(const sim::Op& op, std::int64_t v) {
  if (v < 0 || v > INT_MAX) runtime::fail(op, "an extent does not fit cuDNN's and cuBLAS's int");
  return static_cast<int>(v);
}

inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

class TensorDesc {
 public:
  TensorDesc() { MEMPLAN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  ~TensorDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyTensorDescriptor(d_)); }
  /// A contiguous float tensor of these extents (at least 4: trailing 1s are added).
  void set(const sim::Op& op, std::vector<std::int64_t> dims) {
    while (dims.size() < 4) dims.push_back(1);
    std::vector<int> d(dims.size());
    std::vector<int> s(dims.size());
    std::int64_t stride = 1;
    for (std::size_t i = dims.size(); i-- > 0;) {
      d[i] = as_int(op, dims[i]);
      s[i] = as_int(op, stride);
      stride *= dims[i];
    }
    MEMPLAN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d_, CUDNN_DATA_FLOAT, static_cast<int>(d.size()),
                                                   d.data(), s.data()));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

}  // namespace memplan::cuda_backend::ops
