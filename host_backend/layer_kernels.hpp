#pragma once
// The non-convolution layers on the host, forward and backward, on contiguous float32 tensors in
// PyTorch's layouts. Each backward kernel reads exactly what PyTorch autograd saves for that layer
// (ReLU its output, max-pool its indices, batch-norm its input and per-channel statistics, linear
// its input, dropout its mask, softmax cross-entropy its probabilities), which is what a plan
// keeps, swaps, recomputes or encodes. Deterministic: same inputs, same bits.
#include <cstdint>

#include "runtime/host_ops.hpp"

namespace memplan::host_backend {

// ---- ReLU -------------------------------------------------------------------------------------
void relu_forward(std::int64_t n, const float* x, float* y);  // y may alias x (in place)
/// dx = dy where y > 0, else 0. Reads the forward output, as PyTorch's ReluBackward does.
void relu_backward(std::int64_t n, const float* dy, const float* y, float* dx);
/// ReLU6: y = min(max(x, 0), 6); y may alias x.
void relu6_forward(std::int64_t n, const float* x, float* y);
/// dx = dy where 0 < y < 6, else 0 (PyTorch's hardtanh backward on the in-place result).
void relu6_backward(std::int64_t n, const float* dy, const float* y, float* dx);

// ---- batch-norm (training mode, per channel over batch and space) -----------------------------
struct BatchNormShape {
  std::int64_t batch = 1, channels = 1, spatial = 1;  // spatial = D*H*W
  float epsilon = 1e-5f;
};
/// Writes y, and the saved per-channel mean and 1/sqrt(var + eps).
void batch_norm_forward(const BatchNormShape& s, const float* x, const float* gamma,
                        const float* beta, float* y, float* save_mean, float* save_invstd);
/// Writes dx (when not null), dgamma, dbeta (overwritten) from the saved input and statistics.
void batch_norm_backward(const BatchNormShape& s, const float* x, const float* gamma,
                         const float* save_mean, const float* save_invstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta);

// ---- pooling (2D N×C×H×W, or 3D N×C×D×H×W; 2D is depth 1) ------------------------------------
struct PoolShape {
  std::int64_t batch = 1, channels = 1, in_d = 1, in_h = 1, in_w = 1;
  std::int64_t kernel_d = 1, kernel_h = 2, kernel_w = 2, stride_d = 1, stride_h = 2, stride_w = 2;
  std::int64_t pad_d = 0, pad_h = 0, pad_w = 0;
  /// PyTorch's ceil_mode: a last, partial window when it starts inside the input or its left
  /// padding. Windows are clipped to the input; an average divides by the window clipped to the
  /// padded input (count_include_pad=True), as PyTorch does.
  bool ceil_mode = false;
  [[nodiscard]] static std::int64_t extent(std::int64_t in, std::int64_t k, std::int64_t s,
                                           std::int64_t p, bool ceil) {
    const std::int64_t span = in + 2 * p - k;
    if (span < 0) return 0;
    std::int64_t out = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (out - 1) * s >= in + p) --out;
    return out;
  }
  [[nodiscard]] std::int64_t out_d() const {
    return extent(in_d, kernel_d, stride_d, pad_d, ceil_mode);
  }
  [[nodiscard]] std::int64_t out_h() const {
    return extent(in_h, kernel_h, stride_h, pad_h, ceil_mode);
  }
  [[nodiscard]] std::int64_t out_w() const {
    return extent(in_w, kernel_w, stride_w, pad_w, ceil_mode);
  }
  [[nodiscard]] std::int64_t output_elements() const {
    return batch * channels * out_d() * out_h() * out_w();
  }
  [[nodiscard]] std::int64_t input_elements() const {
    return batch * channels * in_d * in_h * in_w;
  }
  void check() const;
};
/// y and, per output, the flat index within its input plane (volume in 3D) of the maximum
/// (PyTorch's indices).
void max_pool_forward(const PoolShape& s, const float* x, float* y, std::int64_t* indices);
void max_pool_backward(const PoolShape& s, const float* dy, const std::int64_t* indices, float* dx);
/// Average over the window, padding counted (PyTorch's count_include_pad=True).
void avg_pool_forward(const PoolShape& s, const float* x, float* y);
void avg_pool_backward(const PoolShape& s, const float* dy, float* dx);

/// Adaptive average pooling (PyTorch's AdaptiveAvgPool2d/3d): output cell i along an axis averages
/// input [floor(i·in/out), ceil((i+1)·in/out)). 2D is depth 1. `planes` = batch × channels.
struct AdaptivePoolShape {
  std::int64_t planes = 1;
  std::int64_t in_d = 1, in_h = 1, in_w = 1;
  std::int64_t out_d = 1, out_h = 1, out_w = 1;
  [[nodiscard]] std::int64_t input_elements() const { return planes * in_d * in_h * in_w; }
  [[nodiscard]] std::int64_t output_elements() const { return planes * out_d * out_h * out_w; }
  void check() const;  // throws std::invalid_argument
};
void adaptive_avg_pool_forward(const AdaptivePoolShape& s, const float* x, float* y);
void adaptive_avg_pool_backward(const AdaptivePoolShape& s, const float* dy, float* dx);

// ---- linear: y[n×out] = x[n×in] · wᵀ + b, w[out×in] (PyTorch's layout) ------------------------
void linear_forward(std::int64_t n, std::int64_t in, std::int64_t out, const float* x,
                    const float* w, const float* b, float* y);
/// dx (when not null) = dy·w; dw = dyᵀ·x; db (when not null) = column sums of dy.
void linear_backward(std::int64_t n, std::int64_t in, std::int64_t out, const float* x,
                     const float* w, const float* dy, float* dx, float* dw, float* db);

// ---- element-wise add and channel concat --------------------------------------------------------
void add_forward(std::int64_t n, const float* a, const float* b, float* y);
/// Concatenates `count` tensors along dim 1: part i is batch × channels[i] × spatial.
void concat_forward(std::int64_t batch, std::int64_t spatial, int count,
                    const std::int64_t* channels, const float* const* parts, float* y);
void concat_backward(std::int64_t batch, std::int64_t spatial, int count,
                     const std::int64_t* channels, const float* dy, float* const* dparts);

// ---- dropout: the mask is a function of (seed, element index) only ----------------------------
void dropout_forward(std::int64_t n, float p, std::uint64_t seed, const float* x, float* y,
                     std::uint8_t* mask);
void dropout_backward(std::int64_t n, float p, const float* dy, const std::uint8_t* mask,
                      float* dx);

// ---- softmax cross-entropy over logits[n×classes] with integer labels
// -----------------------------
/// Returns the mean loss; writes the probabilities (saved for backward).
float softmax_cross_entropy_forward(std::int64_t n, std::int64_t classes, const float* logits,
                                    const std::int64_t* labels, float* probs);
/// dlogits = (probs - onehot(labels)) / n.
void softmax_cross_entropy_backward(std::int64_t n, std::int64_t classes, const float* probs,
                                    const std::int64_t* labels, float* dlogits);

// ---- SGD with momentum (PyTorch's rule): v = mu*v + g + wd*w; w -= lr*v ------------------------
// One CPU loop for an update on the host device and an update on the host (runtime/host_ops.hpp).
using runtime::sgd_momentum_update;

// ---- Adam (torch.optim.Adam's rule, bias-corrected by the step count; runtime/host_ops.hpp) -----
using runtime::adam_step;
using runtime::adam_update;
using runtime::AdamStep;

}  // namespace memplan::host_backend
