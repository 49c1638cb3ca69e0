// Pooling and concat on CUDA, forward and backward: max pooling 2-d and 3-d with PyTorch's int64
// indices and adaptive average pooling (this backend's kernels, kernels.cuh), average pooling
// (cuDNN, count_include_pad), and concat along the channels (strided copies). The extents each
// reads from the op's tensors and attributes are checked here, as the host backend checks them.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_ops.hpp"
#include "cuda_backend/cudnn_descriptors.hpp"
#include "cuda_backend/kernels.cuh"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend::ops {

namespace {

using runtime::attr;
using runtime::elements;
using runtime::f32;
using runtime::fail;
using runtime::i64;

/// Max pooling's extents: x and y [N, C, H, W] (max_pool2d) or [N, C, D, H, W] (max_pool3d);
/// attributes as the host backend reads them (kernel 2, stride = kernel, padding 0 by default).
kernels::PoolExtents pool_extents(const sim::Op& op, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = op.layer.rule().spatial_dims == 3 ? 5 : 4;
  if (x.shape.size() != rank || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, op.layer.str() + " needs " + std::to_string(rank) + "-d tensors of the same N and C");
  }
  const std::size_t h = rank == 5 ? 1 : 0;  // attribute index of H
  kernels::PoolExtents e{};
  e.planes = x.shape[0] * x.shape[1];
  e.in_d = e.out_d = e.kernel_d = e.stride_d = 1;
  e.pad_d = 0;
  if (rank == 5) {
    e.in_d = x.shape[2];
    e.out_d = y.shape[2];
    e.kernel_d = attr(op, "kernel", 0, 2);
    e.stride_d = attr(op, "stride", 0, e.kernel_d);
    e.pad_d = attr(op, "padding", 0, 0);
  }
  e.in_h = x.shape[rank - 2];
  e.in_w = x.shape[rank - 1];
  e.out_h = y.shape[rank - 2];
  e.out_w = y.shape[rank - 1];
  e.kernel_h = attr(op, "kernel", h, 2);
  e.kernel_w = attr(op, "kernel", h + 1, 2);
  e.stride_h = attr(op, "stride", h, e.kernel_h);
  e.stride_w = attr(op, "stride", h + 1, e.kernel_w);
  e.pad_h = attr(op, "padding", h, 0);
  e.pad_w = attr(op, "padding", h + 1, 0);
  if (e.kernel_d <= 0 || e.kernel_h <= 0 || e.kernel_w <= 0 || e.stride_d <= 0 || e.stride_h <= 0 ||
      e.stride_w <= 0 || e.pad_d < 0 || e.pad_h < 0 || e.pad_w < 0 || e.out_d <= 0 ||
      e.out_h <= 0 || e.out_w <= 0) {
    fail(op, "pooling: inconsistent extents");
  }
  return e;
}

/// Average pooling (count_include_pad, as PyTorch's default) for 2-d and 3-d windows.
class AvgPool {
 public:
  AvgPool(const sim::Op& op, const sim::Tensor& xt, const sim::Tensor& yt) {
    const std::size_t rank = xt.shape.size();
    if ((rank != 4 && rank != 5) || yt.shape.size() != rank) {
      fail(op, "average pooling needs 4-d or 5-d tensors");
    }
    const std::size_t spatial = rank - 2;
    MEMPLAN_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    std::vector<int> window(spatial), pad(spatial), stride(spatial);
    for (std::size_t i = 0; i < spatial; ++i) {
      window[i] = as_int(op, attr(op, "kernel", i, 2));
      stride[i] = as_int(op, attr(op, "stride", i, window[i]));
      pad[i] = as_int(op, attr(op, "padding", i, 0));
    }
    MEMPLAN_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(
        pool_, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN,
        static_cast<int>(spatial), window.data(), pad.data(), stride.data()));
    x.set(op, xt.shape);
    y.set(op, yt.shape);
    std::vector<int> out(rank);
    MEMPLAN_CUDNN_CHECK(
        cudnnGetPoolingNdForwardOutputDim(pool_, x.get(), static_cast<int>(rank), out.data()));
    for (std::size_t i = 0; i < rank; ++i) {
      if (out[i] != yt.shape[i]) {
        fail(op, "the output's extents are not cuDNN's (ceil_mode is not supported)");
      }
    }
  }
  AvgPool(const AvgPool&) = delete;
  AvgPool& operator=(const AvgPool&) = delete;
  ~AvgPool() { MEMPLAN_CUDNN_REPORT(cudnnDestroyPoolingDescriptor(pool_)); }
  cudnnPoolingDescriptor_t get() const { return pool_; }
  TensorDesc x, y;

 private:
  cudnnPoolingDescriptor_t pool_ = nullptr;
};

/// Adaptive average pooling from x [N, C, (D,) H, W] to y of the same rank.
kernels::AdaptiveExtents adaptive_extents(const sim::Op& op, const sim::Tensor& x,
                                          const sim::Tensor& y) {
  const std::size_t rank = x.shape.size();
  if ((rank != 4 && rank != 5) || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, "adaptive_avg_pool maps [N, C, spatial...] to [N, C, spatial...] of rank 4 or 5");
  }
  kernels::AdaptiveExtents e{x.shape[0] * x.shape[1], 1, x.shape[rank - 2],
                             x.shape[rank - 1],       1, y.shape[rank - 2],
                             y.shape[rank - 1]};
  if (rank == 5) {
    e.in_d = x.shape[2];
    e.out_d = y.shape[2];
  }
  if (e.in_d <= 0 || e.in_h <= 0 || e.in_w <= 0 || e.out_d <= 0 || e.out_h <= 0 || e.out_w <= 0) {
    fail(op, "adaptive_avg_pool: empty extents");
  }
  return e;
}

/// Concat along dim 1: parts [N, C_i, ...] <-> whole [N, sum C_i, ...], one strided copy per part
/// (`gather`: parts into the whole; else the whole's slices into the parts).
void concat_copy(const sim::Op& op, cudaStream_t stream,
                 const std::vector<const sim::Tensor*>& parts, std::span<void* const> part_data,
                 void* whole, bool gather) {
  std::int64_t spatial = -1;
  std::int64_t total = 0;
  for (const sim::Tensor* t : parts) {
    if (t->shape.size() < 2) fail(op, "concat parts are [N, C, ...]");
    const std::int64_t sp = elements(*t) / (t->shape[0] * t->shape[1]);
    if (spatial >= 0 && sp != spatial) fail(op, "concat parts differ in spatial extents");
    spatial = sp;
    total += t->shape[1];
  }
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto row = static_cast<std::size_t>(parts[i]->shape[1] * spatial) * sizeof(float);
    const auto pitch = static_cast<std::size_t>(total * spatial) * sizeof(float);
    auto* slice =
        static_cast<std::byte*>(whole) + static_cast<std::size_t>(offset * spatial) * sizeof(float);
    const auto batch = static_cast<std::size_t>(parts[i]->shape[0]);
    if (gather) {
      MEMPLAN_CUDA_CHECK(cudaMemcpy2DAsync(slice, pitch, part_data[i], row, row, batch,
                                           cudaMemcpyDeviceToDevice, stream));
    } else {
      MEMPLAN_CUDA_CHECK(cudaMemcpy2DAsync(part_data[i], row, slice, pitch, row, batch,
                                           cudaMemcpyDeviceToDevice, stream));
    }
    offset += parts[i]->shape[1];
  }
}

}  // namespace

namespace fwd {

void max_pool(const CudaCall& c) {
  if (c.out.size() != 2) c.fail(c.op.layer.str() + " writes its output and its indices");
  MEMPLAN_CUDA_CHECK(kernels::max_pool_forward(c.stream, pool_extents(c.op, c.t_in(0), c.t_out(0)),
                                               f32(c.in[0]), f32(c.out[0]), i64(c.out[1])));
}

void adaptive_avg_pool(const CudaCall& c) {
  MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_forward(
      c.stream, adaptive_extents(c.op, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0])));
}

void concat(const CudaCall& c) {
  std::vector<const sim::Tensor*> parts;
  for (std::size_t i = 0; i < c.in.size(); ++i) parts.push_back(&c.t_in(i));
  concat_copy(c.op, c.stream, parts, c.in, c.out[0], true);
}

void avg_pool(const CudaCall& c) {
  const AvgPool p(c.op, c.t_in(0), c.t_out(0));
  MEMPLAN_CUDNN_CHECK(cudnnPoolingForward(c.cudnn, p.get(), &kOne, p.x.get(), c.in[0], &kZero,
                                          p.y.get(), c.out[0]));
}

}  // namespace fwd

namespace bwd {

void adaptive_avg_pool(const CudaCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("adaptive_avg_pool backward reads dy and x");
  MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_backward(
      c.stream, adaptive_extents(c.op, c.t_out(0), c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void concat(const CudaCall& c) {
  // [dy] -> the gradient of every part (all parts: the split is by position)
  if (c.in.size() != 1) c.fail("concat backward reads dy");
  if (c.op.differentiates == sim::kNoOp ||
      c.workload.op(c.op.differentiates).inputs.size() != c.out.size()) {
    c.fail("concat backward must write the gradient of every part of its forward op");
  }
  std::vector<const sim::Tensor*> parts;
  for (std::size_t i = 0; i < c.out.size(); ++i) parts.push_back(&c.t_out(i));
  concat_copy(c.op, c.stream, parts, c.out, c.in[0], false);
}

void max_pool(const CudaCall& c) {
  // [dy, saved input, indices] -> [dx]
  if (c.in.size() != 3 || c.out.size() != 1)
    c.fail(c.op.layer.str() + " backward reads dy, x, indices");
  MEMPLAN_CUDA_CHECK(kernels::max_pool_backward(c.stream, pool_extents(c.op, c.t_out(0), c.t_in(0)),
                                                f32(c.in[0]), i64(c.in[2]), f32(c.out[0])));
}

void avg_pool(const CudaCall& c) {
  // [dy, x] -> [dx]. Average pooling's gradient does not depend on y; cuDNN's call takes a y
  // of y's extents, and dy is one.
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("average pooling backward reads dy and x");
  const AvgPool p(c.op, c.t_out(0), c.t_in(0));
  MEMPLAN_CUDNN_CHECK(cudnnPoolingBackward(c.cudnn, p.get(), &kOne, p.y.get(), c.in[0], p.y.get(),
                                           c.in[0], p.x.get(), c.in[1], &kZero, p.x.get(),
                                           c.out[0]));
}

}  // namespace bwd

}  // namespace memplan::cuda_backend::ops
