// The CUDA backend's kernels for the transformer's layers (kernels.cuh): layer-norm, GELU,
// embedding, and attention's scores and context over a fused qkv, in the order of summation of
// host_backend/transformer_kernels.cpp.
#include <cmath>
#include <cstdint>

#include "cuda_backend/kernel_launch.cuh"
#include "cuda_backend/kernels.cuh"

namespace memplan::cuda_backend::kernels {

namespace {

/// 1/√d of the host backend: computed in double, rounded to float.
float attention_scale(const AttentionExtents& e) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(e.hidden / e.heads)));
}

// ---- transformer layers (host_backend/transformer_kernels.cpp, in its order of summation)
// ---------

/// One thread per row.
__global__ void layer_norm_forward_kernel(std::int64_t rows, std::int64_t h, float epsilon,
                                          const float* x, const float* w, const float* b, float* y,
                                          float* mean, float* rstd) {
  MEMPLAN_GRID_STRIDE(r, rows) {
    const float* xr = x + r * h;
    double sum = 0.0;
    for (std::int64_t i = 0; i < h; ++i) sum += static_cast<double>(xr[i]);
    const double m = sum / static_cast<double>(h);
    double sq = 0.0;
    for (std::int64_t i = 0; i < h; ++i) {
      const double d = static_cast<double>(xr[i]) - m;
      sq += d * d;
    }
    const double var = sq / static_cast<double>(h);  // biased, as PyTorch normalises
    const auto rs = static_cast<float>(1.0 / sqrt(var + static_cast<double>(epsilon)));
    const auto mf = static_cast<float>(m);
    mean[r] = mf;
    rstd[r] = rs;
    for (std::int64_t i = 0; i < h; ++i) {
      y[r * h + i] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[i], mf), rs), w[i]), b[i]);
    }
  }
}

/// dx: one thread per row.
__global__ void layer_norm_dx_kernel(std::int64_t rows, std::int64_t h, const float* x,
                                     const float* w, const float* mean, const float* rstd,
                                     const float* dy, float* dx) {
  MEMPLAN_GRID_STRIDE(r, rows) {
    const float* xr = x + r * h;
    const float* g = dy + r * h;
    double sum_g = 0.0;
    double sum_g_xhat = 0.0;
    for (std::int64_t i = 0; i < h; ++i) {
      const float xhat = __fmul_rn(__fsub_rn(xr[i], mean[r]), rstd[r]);
      const double gw = static_cast<double>(g[i]) * static_cast<double>(w[i]);
      sum_g += gw;
      sum_g_xhat += gw * static_cast<double>(xhat);
    }
    const double n = static_cast<double>(h);
    for (std::int64_t i = 0; i < h; ++i) {
      const auto xhat = static_cast<double>(__fmul_rn(__fsub_rn(xr[i], mean[r]), rstd[r]));
      const double gw = static_cast<double>(g[i]) * static_cast<double>(w[i]);
      dx[r * h + i] = static_cast<float>(static_cast<double>(rstd[r]) *
                                         (gw - sum_g / n - xhat * sum_g_xhat / n));
    }
  }
}

/// dw and db: one thread per column, rows in order.
__global__ void layer_norm_dw_kernel(std::int64_t rows, std::int64_t h, const float* x,
                                     const float* mean, const float* rstd, const float* dy,
                                     float* dw, float* db) {
  MEMPLAN_GRID_STRIDE(i, h) {
    float sw = 0.0f;
    float sb = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float xhat = __fmul_rn(__fsub_rn(x[r * h + i], mean[r]), rstd[r]);
      const float g = dy[r * h + i];
      sw = __fadd_rn(sw, __fmul_rn(g, xhat));
      sb = __fadd_rn(sb, g);
    }
    dw[i] = sw;
    db[i] = sb;
  }
}

constexpr float kSqrtHalf = 0.70710678118654752f;    // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)

__global__ void gelu_forward_kernel(std::int64_t n, const float* x, float* y) {
  MEMPLAN_GRID_STRIDE(i, n) {
    y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * kSqrtHalf));
  }
}

__global__ void gelu_backward_kernel(std::int64_t n, const float* dy, const float* x, float* dx) {
  MEMPLAN_GRID_STRIDE(i, n) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

/// One thread per output value; an index outside the table gives NaN (the host backend refuses
/// it with an error; a GPU kernel cannot throw).
__global__ void embedding_forward_kernel(std::int64_t n, std::int64_t dim, std::int64_t rows,
                                         const std::int64_t* indices, const float* table,
                                         float* y) {
  MEMPLAN_GRID_STRIDE(k, n * dim) {
    const std::int64_t row = indices[k / dim];
    y[k] = row >= 0 && row < rows ? table[row * dim + k % dim] : nanf("");
  }
}

/// One thread per column of the table, the indices in order: no two threads write one value.
__global__ void embedding_backward_kernel(std::int64_t n, std::int64_t dim, std::int64_t rows,
                                          const std::int64_t* indices, const float* dy,
                                          float* dtable) {
  MEMPLAN_GRID_STRIDE(c, dim) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t row = indices[i];
      if (row < 0 || row >= rows) continue;  // the forward wrote NaN for it
      dtable[row * dim + c] = __fadd_rn(dtable[row * dim + c], dy[i * dim + c]);
    }
  }
}

// Element c of head h of part (0 Q, 1 K, 2 V) of token t in batch b, within qkv [B, S, 3H].
__device__ std::int64_t qkv_at(const AttentionExtents& e, std::int64_t b, std::int64_t t, int part,
                               std::int64_t h, std::int64_t c) {
  return (b * e.sequence + t) * 3 * e.hidden + part * e.hidden + h * (e.hidden / e.heads) + c;
}
__device__ std::int64_t score_at(const AttentionExtents& e, std::int64_t b, std::int64_t h,
                                 std::int64_t i, std::int64_t j) {
  return ((b * e.heads + h) * e.sequence + i) * e.sequence + j;
}

/// One thread per score: Q_i·K_j·scale for j <= i, else -inf.
__global__ void attention_scores_forward_kernel(AttentionExtents e, float scale, const float* qkv,
                                                float* scores) {
  const std::int64_t d = e.hidden / e.heads;
  const std::int64_t s = e.sequence;
  MEMPLAN_GRID_STRIDE(k, e.batch * e.heads * s * s) {
    const std::int64_t j = k % s;
    const std::int64_t i = (k / s) % s;
    const std::int64_t h = (k / (s * s)) % e.heads;
    const std::int64_t b = k / (s * s * e.heads);
    if (j > i) {
      scores[k] = -INFINITY;
      continue;
    }
    float dot = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) {
      dot = __fadd_rn(dot, __fmul_rn(qkv[qkv_at(e, b, i, 0, h, c)], qkv[qkv_at(e, b, j, 1, h, c)]));
    }
    scores[k] = __fmul_rn(dot, scale);
  }
}

/// One thread per value of dqkv: dQ_t = Σ_{j<=t} g(t, j)·K_j, dK_t = Σ_{i>=t} g(i, t)·Q_i with
/// g = dscores·scale, dV = 0.
__global__ void attention_scores_backward_kernel(AttentionExtents e, float scale,
                                                 const float* dscores, const float* qkv,
                                                 float* dqkv) {
  const std::int64_t d = e.hidden / e.heads;
  MEMPLAN_GRID_STRIDE(k, e.batch * e.sequence * 3 * e.hidden) {
    const std::int64_t within = k % (3 * e.hidden);
    const auto part = static_cast<int>(within / e.hidden);
    const std::int64_t h = (within % e.hidden) / d;
    const std::int64_t c = within % d;
    const std::int64_t t = (k / (3 * e.hidden)) % e.sequence;
    const std::int64_t b = k / (3 * e.hidden * e.sequence);
    float sum = 0.0f;
    if (part == 0) {
      for (std::int64_t j = 0; j <= t; ++j) {
        const float g = __fmul_rn(dscores[score_at(e, b, h, t, j)], scale);
        sum = __fadd_rn(sum, __fmul_rn(g, qkv[qkv_at(e, b, j, 1, h, c)]));
      }
    } else if (part == 1) {
      for (std::int64_t i = t; i < e.sequence; ++i) {
        const float g = __fmul_rn(dscores[score_at(e, b, h, i, t)], scale);
        sum = __fadd_rn(sum, __fmul_rn(g, qkv[qkv_at(e, b, i, 0, h, c)]));
      }
    }
    dqkv[k] = sum;
  }
}

/// One thread per value of y [B, S, H]: Σ_j P_ij·V_j of its head.
__global__ void attention_context_forward_kernel(AttentionExtents e, const float* probs,
                                                 const float* qkv, float* y) {
  const std::int64_t d = e.hidden / e.heads;
  MEMPLAN_GRID_STRIDE(k, e.batch * e.sequence * e.hidden) {
    const std::int64_t h = (k % e.hidden) / d;
    const std::int64_t c = k % d;
    const std::int64_t i = (k / e.hidden) % e.sequence;
    const std::int64_t b = k / (e.hidden * e.sequence);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < e.sequence; ++j) {
      sum =
          __fadd_rn(sum, __fmul_rn(probs[score_at(e, b, h, i, j)], qkv[qkv_at(e, b, j, 2, h, c)]));
    }
    y[k] = sum;
  }
}

/// dprobs: one thread per score, dy_i·V_j of its head.
__global__ void attention_dprobs_kernel(AttentionExtents e, const float* dy, const float* qkv,
                                        float* dprobs) {
  const std::int64_t d = e.hidden / e.heads;
  const std::int64_t s = e.sequence;
  MEMPLAN_GRID_STRIDE(k, e.batch * e.heads * s * s) {
    const std::int64_t j = k % s;
    const std::int64_t i = (k / s) % s;
    const std::int64_t h = (k / (s * s)) % e.heads;
    const std::int64_t b = k / (s * s * e.heads);
    const float* g = dy + (b * s + i) * e.hidden + h * d;
    float dot = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) {
      dot = __fadd_rn(dot, __fmul_rn(g[c], qkv[qkv_at(e, b, j, 2, h, c)]));
    }
    dprobs[k] = dot;
  }
}

/// dqkv of attention_context: dV_j = Σ_i P_ij·dy_i (i in order), dQ = dK = 0.
__global__ void attention_dv_kernel(AttentionExtents e, const float* dy, const float* probs,
                                    float* dqkv) {
  const std::int64_t d = e.hidden / e.heads;
  MEMPLAN_GRID_STRIDE(k, e.batch * e.sequence * 3 * e.hidden) {
    const std::int64_t within = k % (3 * e.hidden);
    const std::int64_t h = (within % e.hidden) / d;
    const std::int64_t c = within % d;
    const std::int64_t j = (k / (3 * e.hidden)) % e.sequence;
    const std::int64_t b = k / (3 * e.hidden * e.sequence);
    float sum = 0.0f;
    if (within / e.hidden == 2) {
      for (std::int64_t i = 0; i < e.sequence; ++i) {
        sum = __fadd_rn(sum, __fmul_rn(probs[score_at(e, b, h, i, j)],
                                       dy[(b * e.sequence + i) * e.hidden + h * d + c]));
      }
    }
    dqkv[k] = sum;
  }
}

}  // namespace

cudaError_t layer_norm_forward(cudaStream_t s, std::int64_t rows, std::int64_t h, float epsilon,
                               const float* x, const float* w, const float* b, float* y,
                               float* mean, float* rstd) {
  layer_norm_forward_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, h, epsilon, x, w, b, y,
                                                                  mean, rstd);
  return cudaGetLastError();
}

cudaError_t layer_norm_backward(cudaStream_t s, std::int64_t rows, std::int64_t h, const float* x,
                                const float* w, const float* mean, const float* rstd,
                                const float* dy, float* dx, float* dw, float* db) {
  if (dx != nullptr) {
    layer_norm_dx_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, h, x, w, mean, rstd, dy, dx);
    MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  }
  layer_norm_dw_kernel<<<blocks_for(h), kThreads, 0, s>>>(rows, h, x, mean, rstd, dy, dw, db);
  return cudaGetLastError();
}

cudaError_t gelu_forward(cudaStream_t s, std::int64_t n, const float* x, float* y) {
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t gelu_backward(cudaStream_t s, std::int64_t n, const float* dy, const float* x,
                          float* dx) {
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, dy, x, dx);
  return cudaGetLastError();
}

cudaError_t embedding_forward(cudaStream_t s, std::int64_t n, std::int64_t dim, std::int64_t rows,
                              const std::int64_t* indices, const float* table, float* y) {
  embedding_forward_kernel<<<blocks_for(n * dim), kThreads, 0, s>>>(n, dim, rows, indices, table,
                                                                    y);
  return cudaGetLastError();
}

cudaError_t embedding_backward(cudaStream_t s, std::int64_t n, std::int64_t dim, std::int64_t rows,
                               const std::int64_t* indices, const float* dy, float* dtable) {
  const cudaError_t zeroed = cudaMemsetAsync(
      dtable, 0, static_cast<std::size_t>(rows * dim) * sizeof(float), s);  // all-zero bits: 0.0f
  if (zeroed != cudaSuccess) return zeroed;
  embedding_backward_kernel<<<blocks_for(dim), kThreads, 0, s>>>(n, dim, rows, indices, dy, dtable);
  return cudaGetLastError();
}

cudaError_t attention_scores_forward(cudaStream_t s, const AttentionExtents& e, const float* qkv,
                                     float* scores) {
  attention_scores_forward_kernel<<<blocks_for(e.batch * e.heads * e.sequence * e.sequence),
                                    kThreads, 0, s>>>(e, attention_scale(e), qkv, scores);
  return cudaGetLastError();
}

cudaError_t attention_scores_backward(cudaStream_t s, const AttentionExtents& e,
                                      const float* dscores, const float* qkv, float* dqkv) {
  attention_scores_backward_kernel<<<blocks_for(e.batch * e.sequence * 3 * e.hidden), kThreads, 0,
                                     s>>>(e, attention_scale(e), dscores, qkv, dqkv);
  return cudaGetLastError();
}

cudaError_t attention_context_forward(cudaStream_t s, const AttentionExtents& e, const float* probs,
                                      const float* qkv, float* y) {
  attention_context_forward_kernel<<<blocks_for(e.batch * e.sequence * e.hidden), kThreads, 0, s>>>(
      e, probs, qkv, y);
  return cudaGetLastError();
}

cudaError_t attention_context_backward(cudaStream_t s, const AttentionExtents& e, const float* dy,
                                       const float* probs, const float* qkv, float* dprobs,
                                       float* dqkv) {
  attention_dprobs_kernel<<<blocks_for(e.batch * e.heads * e.sequence * e.sequence), kThreads, 0,
                            s>>>(e, dy, qkv, dprobs);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  attention_dv_kernel<<<blocks_for(e.batch * e.sequence * 3 * e.hidden), kThreads, 0, s>>>(
      e, dy, probs, dqkv);
  return cudaGetLastError();
}

}  // namespace memplan::cuda_backend::kernels
