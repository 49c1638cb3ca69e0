// The dense, element-wise and loss layers on CUDA, forward and backward, and the optimizers:
// linear (cuBLAS, row-major tensors seen as their column-major transposes), batch-norm, ReLU and
// softmax (cuDNN), ReLU6, dropout, add and softmax cross-entropy (with this backend's kernels,
// kernels.cuh), SGD with momentum and Adam (kernels.cuh, with the host's rounded scalars).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_ops.hpp"
#include "cuda_backend/cudnn_descriptors.hpp"
#include "cuda_backend/kernels.cuh"
#include "runtime/host_ops.hpp"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend::ops {

namespace {

using runtime::elements;
using runtime::f32;
using runtime::fail;
using runtime::i64;

void sum_into(cudaStream_t s, std::int64_t n, std::span<void* const> in, float* out) {
  if (in.size() == 1) {
    if (in[0] != out) {
      MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(out, in[0], static_cast<std::size_t>(n) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  MEMPLAN_CUDA_CHECK(kernels::add(s, n, f32(in[0]), f32(in[1]), out));
  for (std::size_t i = 2; i < in.size(); ++i)
    MEMPLAN_CUDA_CHECK(kernels::add(s, n, out, f32(in[i]), out));
}

class ReluDesc {
 public:
  ReluDesc() {
    MEMPLAN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_));
    MEMPLAN_CUDNN_CHECK(
        cudnnSetActivationDescriptor(d_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  ReluDesc(const ReluDesc&) = delete;
  ReluDesc& operator=(const ReluDesc&) = delete;
  ~ReluDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyActivationDescriptor(d_)); }
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

/// Rows × classes of a softmax over the last dimension.
std::pair<std::int64_t, std::int64_t> softmax_rows(const sim::Op& op, const sim::Tensor& t) {
  if (t.shape.empty()) fail(op, "softmax needs a shaped tensor");
  const std::int64_t classes = t.shape.back();
  return {elements(t) / classes, classes};
}

}  // namespace

std::array<float*, 3> grads(const CudaCall& c) {
  const runtime::GradOutputs has = c.grad_outputs();
  std::array<float*, 3> g{nullptr, nullptr, nullptr};
  std::size_t i = 0;
  if (has.dx) g[0] = f32(c.out[i++]);
  g[1] = f32(c.out[i++]);
  if (has.db) g[2] = f32(c.out[i]);
  return g;
}

namespace fwd {

void relu(const CudaCall& c) {
  const ReluDesc activation;
  TensorDesc d;
  d.set(c.op, {elements(c.t_in(0))});
  MEMPLAN_CUDNN_CHECK(cudnnActivationForward(c.cudnn, activation.get(), &kOne, d.get(), c.in[0],
                                             &kZero, d.get(), c.out[0]));
}

void relu6(const CudaCall& c) {
  MEMPLAN_CUDA_CHECK(
      kernels::relu6_forward(c.stream, elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void linear(const CudaCall& c) {
  // Row-major y[n×out] = x[n×in]·wᵀ with w[out×in] (PyTorch's layout). Column-major, cuBLAS
  // sees x as xᵀ (in×n) and w as wᵀ (in×out): yᵀ (out×n) = (wᵀ)ᵀ·xᵀ.
  const sim::Tensor& w = c.t_in(1);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(0)) / w.shape[1];
  const int rows = as_int(c.op, n), k = as_int(c.op, w.shape[1]), m = as_int(c.op, w.shape[0]);
  MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, rows, k, &kOne,
                                   f32(c.in[1]), k, f32(c.in[0]), k, &kZero, f32(c.out[0]), m));
  if (c.in.size() > 2)
    MEMPLAN_CUDA_CHECK(
        kernels::add_bias_rows(c.stream, n, w.shape[0], f32(c.in[2]), f32(c.out[0])));
}

void batch_norm(const CudaCall& c) {
  // [x, weight, bias (, running stats [2, C])] -> [y, save_mean, save_invstd]
  if (c.in.size() < 3 || c.out.size() != 3) {
    c.fail("batch_norm reads x, weight, bias [, running stats], writes y, mean, invstd");
  }
  const sim::Tensor& x = c.t_in(0);
  if (x.shape.size() < 2) c.fail("batch_norm needs [N, C, ...]");
  const std::int64_t channels = x.shape[1];
  TensorDesc xd, bn;
  xd.set(c.op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
  bn.set(c.op, {1, channels});
  // The running statistics (a fourth input) are left as they are, as the host backend leaves
  // them: a step's gradients do not depend on them, and a recompute must not update them twice.
  MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd.get(), c.in[0], xd.get(), c.out[0],
      bn.get(), c.in[1], c.in[2], 0.0, nullptr, nullptr,
      static_cast<double>(c.attr_f("epsilon", 1e-5f)), c.out[1], c.out[2]));
}

void dropout(const CudaCall& c) {
  // The host backend's mask: a function of the forward op (so a recompute redraws it) and of
  // the element index (host_backend::OpExecutor's dropout seed).
  if (c.out.size() != 2) c.fail("dropout writes its output and its mask");
  const float p = c.attr_f("p", 0.5f);
  if (!(p >= 0.0f && p < 1.0f)) c.fail("dropout: p must be in [0, 1)");
  const std::uint64_t seed = runtime::dropout_seed(c.op.id);
  const auto threshold =
      static_cast<std::uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
  MEMPLAN_CUDA_CHECK(kernels::dropout_forward(c.stream, elements(c.t_in(0)), threshold,
                                              1.0f / (1.0f - p), seed, f32(c.in[0]), f32(c.out[0]),
                                              static_cast<std::uint8_t*>(c.out[1])));
}

void add(const CudaCall& c) {
  if (c.in.empty()) c.fail("add needs inputs");
  sum_into(c.stream, elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax(const CudaCall& c) {
  const auto [rows, classes] = softmax_rows(c.op, c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                          CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[0],
                                          &kZero, d.get(), c.out[0]));
}

void softmax_cross_entropy(const CudaCall& c) {
  if (c.in.size() != 2 || c.out.size() != 2) {
    fail(c.op,
         "softmax_cross_entropy reads logits and labels, writes the loss and the probabilities");
  }
  // Classes on the last axis; every other position is one sample (a sequence's tokens too).
  const auto [rows, classes] = c.rows_of(c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                          CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[0],
                                          &kZero, d.get(), c.out[1]));
  auto* log_probs = static_cast<float*>(
      c.executor.scratch(static_cast<std::size_t>(rows * classes) * sizeof(float)));
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE,
                                          &kOne, d.get(), c.in[0], &kZero, d.get(), log_probs));
  MEMPLAN_CUDA_CHECK(
      kernels::cross_entropy_loss(c.stream, rows, classes, log_probs, i64(c.in[1]), f32(c.out[0])));
}

}  // namespace fwd

namespace bwd {

void relu(const CudaCall& c) {
  // [dy, y] -> [dx]: cuDNN's ReLU backward tests x > 0; y > 0 exactly where x > 0, so y is
  // passed for x (the forward input may be gone: PyTorch and the plans keep only y).
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu backward reads dy and y, writes dx");
  const ReluDesc activation;
  TensorDesc d;
  d.set(c.op, {elements(c.t_in(0))});
  MEMPLAN_CUDNN_CHECK(cudnnActivationBackward(c.cudnn, activation.get(), &kOne, d.get(), c.in[1],
                                              d.get(), c.in[0], d.get(), c.in[1], &kZero, d.get(),
                                              c.out[0]));
}

void relu6(const CudaCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu6 backward reads dy and y, writes dx");
  MEMPLAN_CUDA_CHECK(kernels::relu6_backward(c.stream, elements(c.t_in(0)), f32(c.in[0]),
                                             f32(c.in[1]), f32(c.out[0])));
}

void linear(const CudaCall& c) {
  // [dy, x, w] -> [dx,] dw [, db]; w[out×in]. Column-major views (see forward):
  // dxᵀ (in×n) = wᵀ (in×out) · dyᵀ (out×n); dwᵀ (in×out) = xᵀ (in×n) · dy (n×out).
  const auto g = grads(c);
  const sim::Tensor& w = c.t_in(2);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(1)) / w.shape[1];
  const int rows = as_int(c.op, n), k = as_int(c.op, w.shape[1]), m = as_int(c.op, w.shape[0]);
  if (g[0] != nullptr) {
    MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k, rows, m, &kOne,
                                     f32(c.in[2]), k, f32(c.in[0]), m, &kZero, g[0], k));
  }
  MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, m, rows, &kOne,
                                   f32(c.in[1]), k, f32(c.in[0]), m, &kZero, g[1], k));
  if (g[2] != nullptr)
    MEMPLAN_CUDA_CHECK(kernels::column_sums(c.stream, n, w.shape[0], f32(c.in[0]), g[2]));
}

void batch_norm(const CudaCall& c) {
  // [dy, x, weight, save_mean, save_invstd] -> [dx,] dweight, dbias [, d running stats]: as the
  // host backend, a gradient of the running statistics (the zoo gives them one) is zero.
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 4) {
    c.fail("batch_norm backward reads dy, x, weight, mean, invstd, writes [dx,] dw, db");
  }
  const sim::Tensor& x = c.t_in(1);
  if (x.shape.size() < 2) c.fail("batch_norm needs [N, C, ...]");
  const bool has_dx = c.t_out(0).shape == x.shape;
  const std::size_t k = has_dx ? 1 : 0;
  if (c.out.size() < k + 2 || c.out.size() > k + 3) {
    c.fail("batch_norm backward writes [dx,] dw, db [, d running stats]");
  }
  const std::int64_t channels = x.shape[1];
  TensorDesc xd, bn;
  xd.set(c.op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
  bn.set(c.op, {1, channels});
  void* dx =
      has_dx ? c.out[0] : c.executor.scratch(static_cast<std::size_t>(elements(x)) * sizeof(float));
  MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, xd.get(), c.in[1], xd.get(),
      c.in[0], xd.get(), dx, bn.get(), c.in[2], c.out[k], c.out[k + 1],
      static_cast<double>(c.attr_f("epsilon", 1e-5f)), c.in[3], c.in[4]));
  if (c.out.size() == k + 3) {
    MEMPLAN_CUDA_CHECK(
        cudaMemsetAsync(c.out[k + 2], 0, static_cast<std::size_t>(c.t_out(k + 2).bytes), c.stream));
  }
}

void dropout(const CudaCall& c) {
  // [dy, mask] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("dropout backward reads dy and the mask");
  const float p = c.attr_f("p", 0.5f);
  MEMPLAN_CUDA_CHECK(
      kernels::dropout_backward(c.stream, elements(c.t_in(0)), 1.0f / (1.0f - p), f32(c.in[0]),
                                static_cast<const std::uint8_t*>(c.in[1]), f32(c.out[0])));
}

void add(const CudaCall& c) {
  if (c.in.empty() || c.out.size() != 1) c.fail("add backward sums its inputs into one output");
  sum_into(c.stream, elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax(const CudaCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("softmax backward reads dy and y, writes dx");
  const auto [rows, classes] = softmax_rows(c.op, c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxBackward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                           CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[1],
                                           d.get(), c.in[0], &kZero, d.get(), c.out[0]));
}

void softmax_cross_entropy(const CudaCall& c) {
  // [probs, labels] -> [dlogits]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("reads probs and labels, writes dlogits");
  const auto [rows, classes] = c.rows_of(c.t_in(0));
  MEMPLAN_CUDA_CHECK(kernels::cross_entropy_backward(c.stream, rows, classes, f32(c.in[0]),
                                                     i64(c.in[1]), f32(c.out[0])));
}

}  // namespace bwd

namespace update {

void sgd(const CudaCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  // runtime::SgdDefaults
  const float lr = c.attr_f("lr", 0.01f);
  const float momentum = c.attr_f("momentum", 0.9f);
  const float weight_decay = c.attr_f("weight_decay", 0.0f);
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    MEMPLAN_CUDA_CHECK(kernels::sgd_momentum(c.stream, n, lr, momentum, weight_decay, f32(c.in[i]),
                                             f32(c.in[k + i]), f32(c.in[2 * k + i])));
  }
}

void adam(const CudaCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  // The host's scalars (runtime::adam_step), so both backends take the same rounded values.
  const runtime::AdamStep s = runtime::adam_step(c.op);
  const kernels::AdamScalars a{s.beta1_weight,          s.beta2, s.beta2_weight, s.weight_decay,
                               s.bias_correction2_sqrt, s.eps,   s.neg_step_size};
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    MEMPLAN_CUDA_CHECK(kernels::adam(c.stream, n, a, f32(c.in[i]), f32(c.in[k + i]),
                                     f32(c.in[2 * k + i]), f32(c.in[3 * k + i])));
  }
}

}  // namespace update

}  // namespace memplan::cuda_backend::ops
