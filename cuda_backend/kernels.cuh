#pragma once
// The CUDA backend's own kernels (what cuDNN and cuBLAS do not provide), each launched on the
// given stream, on contiguous float32 tensors in PyTorch's layouts. Semantics and byte layouts are
// the host backend's (host_backend/layer_kernels.hpp, host_backend/encodings.hpp), so a map
// encoded here decodes there and the gradients of both backends can be compared. This header is
// C++17 (nvcc builds the .cu files, one per family: layer_kernels.cu, transformer_kernels.cu,
// optimizer_kernels.cu, encoding_kernels.cu), so it takes no memplan type, only pointers and
// extents. Each function returns the launch error of its kernels (cudaGetLastError: a bad
// configuration, no device, an earlier kernel's fault); callers check it with MEMPLAN_CUDA_CHECK
// where they call, so that a failure names the caller's file and line.
#include <cstdint>

#include <cuda_runtime.h>

namespace memplan::cuda_backend::kernels {

// ---- element-wise -------------------------------------------------------------------------------
/// y = a + b (y may alias a or b).
[[nodiscard]] cudaError_t add(cudaStream_t s, std::int64_t n, const float* a, const float* b,
                              float* y);
/// y[r, c] += bias[c] for rows × cols row-major.
[[nodiscard]] cudaError_t add_bias_rows(cudaStream_t s, std::int64_t rows, std::int64_t cols,
                                        const float* bias, float* y);
/// sums[c] = sum over rows of dy[r, c] (row-major rows × cols), in row order (deterministic).
[[nodiscard]] cudaError_t column_sums(cudaStream_t s, std::int64_t rows, std::int64_t cols,
                                      const float* dy, float* sums);

/// relu6: y = min(max(x, 0), 6); dx = dy where 0 < y < 6 (host_backend::relu6_*).
[[nodiscard]] cudaError_t relu6_forward(cudaStream_t s, std::int64_t n, const float* x, float* y);
[[nodiscard]] cudaError_t relu6_backward(cudaStream_t s, std::int64_t n, const float* dy,
                                         const float* y, float* dx);

/// Dropout with the host backend's mask: keep element i when
/// splitmix64(seed ^ splitmix64(i)) >= threshold; kept values scaled by `scale`.
[[nodiscard]] cudaError_t dropout_forward(cudaStream_t s, std::int64_t n, std::uint64_t threshold,
                                          float scale, std::uint64_t seed, const float* x, float* y,
                                          std::uint8_t* mask);
[[nodiscard]] cudaError_t dropout_backward(cudaStream_t s, std::int64_t n, float scale,
                                           const float* dy, const std::uint8_t* mask, float* dx);

/// Adaptive average pooling (PyTorch's windows [floor(i*in/out), ceil((i+1)*in/out))), 2-d or
/// 3-d (in_d = out_d = 1 for 2-d), summed in the host backend's order.
struct AdaptiveExtents {
  std::int64_t planes;
  std::int64_t in_d, in_h, in_w, out_d, out_h, out_w;
};
[[nodiscard]] cudaError_t adaptive_avg_pool_forward(cudaStream_t s, const AdaptiveExtents& e,
                                                    const float* x, float* y);
[[nodiscard]] cudaError_t adaptive_avg_pool_backward(cudaStream_t s, const AdaptiveExtents& e,
                                                     const float* dy, float* dx);

// ---- max pooling with PyTorch's indices (the flat index of the maximum within its plane or
// volume), 2-d or 3-d (2-d: depth extents 1, padding 0); windows are clipped to the input --------
struct PoolExtents {
  std::int64_t planes;  // batch × channels
  std::int64_t in_h, in_w, out_h, out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  std::int64_t in_d, out_d, kernel_d, stride_d, pad_d;
};
[[nodiscard]] cudaError_t max_pool_forward(cudaStream_t s, const PoolExtents& e, const float* x,
                                           float* y, std::int64_t* indices);
/// dx from dy and the indices; each input element gathers the outputs that chose it, in output
/// order, so the sums do not depend on thread scheduling.
[[nodiscard]] cudaError_t max_pool_backward(cudaStream_t s, const PoolExtents& e, const float* dy,
                                            const std::int64_t* indices, float* dx);

// ---- softmax cross-entropy
// -----------------------------------------------------------------------
/// *loss = -mean over rows of log_probs[r, labels[r]] (NaN when a label is out of range).
[[nodiscard]] cudaError_t cross_entropy_loss(cudaStream_t s, std::int64_t rows,
                                             std::int64_t classes, const float* log_probs,
                                             const std::int64_t* labels, float* loss);
/// dlogits = (probs - onehot(labels)) / rows.
[[nodiscard]] cudaError_t cross_entropy_backward(cudaStream_t s, std::int64_t rows,
                                                 std::int64_t classes, const float* probs,
                                                 const std::int64_t* labels, float* dlogits);

// ---- transformer layers (host_backend/transformer_kernels.hpp: the same semantics and order
// of summation; erff and expf may differ from the host's in the last bit) --------------------
/// y = (x - mean) · rstd · w + b per row of `h`; writes the saved mean and rstd per row.
[[nodiscard]] cudaError_t layer_norm_forward(cudaStream_t s, std::int64_t rows, std::int64_t h,
                                             float epsilon, const float* x, const float* w,
                                             const float* b, float* y, float* mean, float* rstd);
/// dx (when not null), dw and db (overwritten) from the saved input, mean and rstd.
[[nodiscard]] cudaError_t layer_norm_backward(cudaStream_t s, std::int64_t rows, std::int64_t h,
                                              const float* x, const float* w, const float* mean,
                                              const float* rstd, const float* dy, float* dx,
                                              float* dw, float* db);
/// y = x · Φ(x) (erf form); the backward reads x.
[[nodiscard]] cudaError_t gelu_forward(cudaStream_t s, std::int64_t n, const float* x, float* y);
[[nodiscard]] cudaError_t gelu_backward(cudaStream_t s, std::int64_t n, const float* dy,
                                        const float* x, float* dx);
/// y[i] = table[indices[i]] (rows of `dim`); an index outside the table's `rows` gives a NaN row.
[[nodiscard]] cudaError_t embedding_forward(cudaStream_t s, std::int64_t n, std::int64_t dim,
                                            std::int64_t rows, const std::int64_t* indices,
                                            const float* table, float* y);
/// dtable (overwritten) = the dy rows summed per index, in index order.
[[nodiscard]] cudaError_t embedding_backward(cudaStream_t s, std::int64_t n, std::int64_t dim,
                                             std::int64_t rows, const std::int64_t* indices,
                                             const float* dy, float* dtable);
/// Attention over a fused qkv [B, S, 3H] (heads divide H): scores [B, heads, S, S] = Q·Kᵀ/√d
/// with the causal mask (-inf above the diagonal); context y [B, S, H] = P·V, heads merged.
struct AttentionExtents {
  std::int64_t batch, sequence, hidden, heads;
};
[[nodiscard]] cudaError_t attention_scores_forward(cudaStream_t s, const AttentionExtents& e,
                                                   const float* qkv, float* scores);
/// dqkv (overwritten): the Q and K parts; the V part is zero.
[[nodiscard]] cudaError_t attention_scores_backward(cudaStream_t s, const AttentionExtents& e,
                                                    const float* dscores, const float* qkv,
                                                    float* dqkv);
[[nodiscard]] cudaError_t attention_context_forward(cudaStream_t s, const AttentionExtents& e,
                                                    const float* probs, const float* qkv, float* y);
/// dprobs and dqkv (overwritten): its V part; the Q and K parts are zero.
[[nodiscard]] cudaError_t attention_context_backward(cudaStream_t s, const AttentionExtents& e,
                                                     const float* dy, const float* probs,
                                                     const float* qkv, float* dprobs, float* dqkv);

// ---- SGD with momentum (PyTorch's rule): v = mu*v + g + wd*w; w -= lr*v ------------------------
[[nodiscard]] cudaError_t sgd_momentum(cudaStream_t s, std::int64_t n, float lr, float momentum,
                                       float weight_decay, float* w, const float* grad,
                                       float* velocity);

// ---- Adam (torch.optim.Adam's rule; runtime::adam_update is the host's loop) --------------------
/// The per-step scalars, rounded to float on the host (runtime::AdamStep, field for field).
struct AdamScalars {
  float beta1_weight;           // 1 - beta1
  float beta2;                  // beta2
  float beta2_weight;           // 1 - beta2
  float weight_decay;           // applied when not 0
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};
/// g' = g + wd*w (wd != 0); m = m + (1-b1)*(g' - m); v = v*b2 + ((1-b2)*g')*g';
/// w = w + (-step_size*m) / (sqrt(v)/bc2_sqrt + eps), every operation rounded in that order.
[[nodiscard]] cudaError_t adam(cudaStream_t s, std::int64_t n, const AdamScalars& a, float* w,
                               const float* grad, float* exp_avg, float* exp_avg_sq);

// ---- Gist's encodings
// -----------------------------------------------------------------------------
[[nodiscard]] cudaError_t binarize_encode(cudaStream_t s, std::int64_t n, const float* x,
                                          std::uint8_t* bits);
[[nodiscard]] cudaError_t binarize_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* bits,
                                          float* x);

/// Sparse blocks of 256 values: a 16-bit count, then (8-bit index, 32-bit value) pairs. `scratch`
/// holds sparse_scratch_bytes(n) device bytes; `*overflow` (device memory) is set to 1 when the
/// encoding needs more than `capacity` bytes (nothing past `capacity` is written), else 0.
std::int64_t sparse_scratch_bytes(std::int64_t n);
[[nodiscard]] cudaError_t sparse_encode(cudaStream_t s, std::int64_t n, const float* x,
                                        std::uint8_t* out, std::int64_t capacity, void* scratch,
                                        int* overflow);
[[nodiscard]] cudaError_t sparse_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* in,
                                        float* x, void* scratch);

/// Narrow floats: 1 sign bit, `exponent_bits`, `mantissa_bits`, round to nearest even,
/// saturating, packed as a little-endian bit stream (value i at bits [i*b, i*b+b)).
[[nodiscard]] cudaError_t narrow_encode(cudaStream_t s, int exponent_bits, int mantissa_bits,
                                        std::int64_t n, const float* x, std::uint8_t* out);
[[nodiscard]] cudaError_t narrow_decode(cudaStream_t s, int exponent_bits, int mantissa_bits,
                                        std::int64_t n, const std::uint8_t* in, float* x);

}  // namespace memplan::cuda_backend::kernels
