#include "cuda_backend/kernels.cuh"

#include <algorithm>
#include <cmath>

namespace memplan::cuda_backend::kernels {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kSparseBlock = 256;  // host_backend::kSparseBlock

unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 65535)));
}

/// 1/√d of the host backend: computed in double, rounded to float.
float attention_scale(const AttentionExtents& e) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(e.hidden / e.heads)));
}

#define MEMPLAN_GRID_STRIDE(i, n)                                                                  \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

/// The launch error (bad configuration, no device, ...) of the last launch, or of an earlier one
/// of a wrapper that launches several kernels: the first failure returns at once.
#define MEMPLAN_RETURN_IF_LAUNCH_FAILED()                       \
  do {                                                          \
    const cudaError_t memplan_launch_ = cudaGetLastError();     \
    if (memplan_launch_ != cudaSuccess) return memplan_launch_; \
  } while (false)

// ---- element-wise
// ---------------------------------------------------------------------------------

__global__ void add_kernel(std::int64_t n, const float* a, const float* b, float* y) {
  MEMPLAN_GRID_STRIDE(i, n) {
    y[i] = __fadd_rn(a[i], b[i]);
  }
}

__global__ void add_bias_rows_kernel(std::int64_t rows, std::int64_t cols, const float* bias,
                                     float* y) {
  MEMPLAN_GRID_STRIDE(i, rows * cols) {
    y[i] = __fadd_rn(y[i], bias[i % cols]);
  }
}

__global__ void column_sums_kernel(std::int64_t rows, std::int64_t cols, const float* dy,
                                   float* sums) {
  MEMPLAN_GRID_STRIDE(c, cols) {
    float s = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) s = __fadd_rn(s, dy[r * cols + c]);
    sums[c] = s;
  }
}

// ---- relu6, dropout, adaptive average pooling --------------------------------------------------

__global__ void relu6_forward_kernel(std::int64_t n, const float* x, float* y) {
  MEMPLAN_GRID_STRIDE(i, n) {
    y[i] = fminf(fmaxf(x[i], 0.0f), 6.0f);
  }
}

__global__ void relu6_backward_kernel(std::int64_t n, const float* dy, const float* y, float* dx) {
  MEMPLAN_GRID_STRIDE(i, n) {
    dx[i] = y[i] > 0.0f && y[i] < 6.0f ? dy[i] : 0.0f;
  }
}

__device__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void dropout_forward_kernel(std::int64_t n, std::uint64_t threshold, float scale,
                                       std::uint64_t seed, const float* x, float* y,
                                       std::uint8_t* mask) {
  MEMPLAN_GRID_STRIDE(i, n) {
    const bool keep = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(i))) >= threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
  }
}

__global__ void dropout_backward_kernel(std::int64_t n, float scale, const float* dy,
                                        const std::uint8_t* mask, float* dx) {
  MEMPLAN_GRID_STRIDE(i, n) {
    dx[i] = mask[i] != 0 ? __fmul_rn(dy[i], scale) : 0.0f;
  }
}

__device__ std::int64_t window_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
__device__ std::int64_t window_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

__global__ void adaptive_forward_kernel(AdaptiveExtents e, const float* x, float* y) {
  const std::int64_t in_plane = e.in_d * e.in_h * e.in_w;
  const std::int64_t out_plane = e.out_d * e.out_h * e.out_w;
  MEMPLAN_GRID_STRIDE(o, e.planes * out_plane) {
    const std::int64_t p = o / out_plane;
    const std::int64_t od = (o % out_plane) / (e.out_h * e.out_w);
    const std::int64_t oh = (o % (e.out_h * e.out_w)) / e.out_w;
    const std::int64_t ow = o % e.out_w;
    const std::int64_t d0 = window_start(od, e.in_d, e.out_d);
    const std::int64_t d1 = window_end(od, e.in_d, e.out_d);
    const std::int64_t h0 = window_start(oh, e.in_h, e.out_h);
    const std::int64_t h1 = window_end(oh, e.in_h, e.out_h);
    const std::int64_t w0 = window_start(ow, e.in_w, e.out_w);
    const std::int64_t w1 = window_end(ow, e.in_w, e.out_w);
    const float inv = 1.0f / static_cast<float>((d1 - d0) * (h1 - h0) * (w1 - w0));
    float sum = 0.0f;
    for (std::int64_t d = d0; d < d1; ++d) {
      for (std::int64_t h = h0; h < h1; ++h) {
        for (std::int64_t w = w0; w < w1; ++w) {
          sum = __fadd_rn(sum, __fmul_rn(x[p * in_plane + (d * e.in_h + h) * e.in_w + w], inv));
        }
      }
    }
    y[o] = sum;
  }
}

/// Each input element gathers the outputs whose window holds it, in output order.
__global__ void adaptive_backward_kernel(AdaptiveExtents e, const float* dy, float* dx) {
  const std::int64_t in_plane = e.in_d * e.in_h * e.in_w;
  const std::int64_t out_plane = e.out_d * e.out_h * e.out_w;
  MEMPLAN_GRID_STRIDE(i, e.planes * in_plane) {
    const std::int64_t p = i / in_plane;
    const std::int64_t d = (i % in_plane) / (e.in_h * e.in_w);
    const std::int64_t h = (i % (e.in_h * e.in_w)) / e.in_w;
    const std::int64_t w = i % e.in_w;
    float g = 0.0f;
    for (std::int64_t od = 0; od < e.out_d; ++od) {
      const std::int64_t d0 = window_start(od, e.in_d, e.out_d);
      const std::int64_t d1 = window_end(od, e.in_d, e.out_d);
      if (d < d0 || d >= d1) continue;
      for (std::int64_t oh = 0; oh < e.out_h; ++oh) {
        const std::int64_t h0 = window_start(oh, e.in_h, e.out_h);
        const std::int64_t h1 = window_end(oh, e.in_h, e.out_h);
        if (h < h0 || h >= h1) continue;
        for (std::int64_t ow = 0; ow < e.out_w; ++ow) {
          const std::int64_t w0 = window_start(ow, e.in_w, e.out_w);
          const std::int64_t w1 = window_end(ow, e.in_w, e.out_w);
          if (w < w0 || w >= w1) continue;
          const float inv = 1.0f / static_cast<float>((d1 - d0) * (h1 - h0) * (w1 - w0));
          const std::int64_t o = p * out_plane + (od * e.out_h + oh) * e.out_w + ow;
          g = __fadd_rn(g, __fmul_rn(dy[o], inv));
        }
      }
    }
    dx[i] = g;
  }
}

// ---- max pooling
// ----------------------------------------------------------------------------------

__global__ void max_pool_forward_kernel(PoolExtents e, const float* x, float* y,
                                        std::int64_t* indices) {
  const std::int64_t out_area = e.out_h * e.out_w;
  const std::int64_t out_volume = e.out_d * out_area;
  const std::int64_t in_volume = e.in_d * e.in_h * e.in_w;
  MEMPLAN_GRID_STRIDE(o, e.planes * out_volume) {
    const std::int64_t p = o / out_volume;
    const std::int64_t k = (o % out_volume) / out_area;
    const std::int64_t i = (o % out_area) / e.out_w;
    const std::int64_t j = o % e.out_w;
    const float* in = x + p * in_volume;
    float best = -INFINITY;
    std::int64_t best_index = -1;
    // Depth, rows, columns: the host backend's order, so ties and NaNs pick the same element.
    for (std::int64_t t = 0; t < e.kernel_d; ++t) {
      const std::int64_t iz = k * e.stride_d - e.pad_d + t;
      if (iz < 0 || iz >= e.in_d) continue;
      for (std::int64_t r = 0; r < e.kernel_h; ++r) {
        const std::int64_t iy = i * e.stride_h - e.pad_h + r;
        if (iy < 0 || iy >= e.in_h) continue;
        for (std::int64_t c = 0; c < e.kernel_w; ++c) {
          const std::int64_t ix = j * e.stride_w - e.pad_w + c;
          if (ix < 0 || ix >= e.in_w) continue;
          const std::int64_t at = (iz * e.in_h + iy) * e.in_w + ix;
          const float v = in[at];
          if (best_index < 0 || v > best || isnan(v)) {
            best = v;
            best_index = at;
          }
        }
      }
    }
    y[o] = best;
    indices[o] = best_index;
  }
}

/// Lowest and highest output position along one axis whose window holds input position `i`:
/// o*stride - pad <= i < o*stride - pad + kernel, within [0, out).
__device__ std::int64_t first_window(std::int64_t i, std::int64_t kernel, std::int64_t stride,
                                     std::int64_t pad) {
  return max(std::int64_t{0}, (i + pad - kernel + stride) / stride);
}
__device__ std::int64_t last_window(std::int64_t i, std::int64_t stride, std::int64_t pad,
                                    std::int64_t out) {
  return min(out - 1, (i + pad) / stride);
}

__global__ void max_pool_backward_kernel(PoolExtents e, const float* dy,
                                         const std::int64_t* indices, float* dx) {
  const std::int64_t area = e.in_h * e.in_w;
  const std::int64_t volume = e.in_d * area;
  const std::int64_t out_area = e.out_h * e.out_w;
  const std::int64_t out_volume = e.out_d * out_area;
  MEMPLAN_GRID_STRIDE(n, e.planes * volume) {
    const std::int64_t p = n / volume;
    const std::int64_t flat = n % volume;
    const std::int64_t iz = flat / area;
    const std::int64_t iy = (flat % area) / e.in_w;
    const std::int64_t ix = flat % e.in_w;
    const std::int64_t oz_hi = last_window(iz, e.stride_d, e.pad_d, e.out_d);
    const std::int64_t oy_hi = last_window(iy, e.stride_h, e.pad_h, e.out_h);
    const std::int64_t ox_hi = last_window(ix, e.stride_w, e.pad_w, e.out_w);
    // In output order, as the host backend accumulates: the same sums, bit for bit.
    float g = 0.0f;
    for (std::int64_t oz = first_window(iz, e.kernel_d, e.stride_d, e.pad_d); oz <= oz_hi; ++oz) {
      for (std::int64_t oy = first_window(iy, e.kernel_h, e.stride_h, e.pad_h); oy <= oy_hi; ++oy) {
        for (std::int64_t ox = first_window(ix, e.kernel_w, e.stride_w, e.pad_w); ox <= ox_hi;
             ++ox) {
          const std::int64_t o = p * out_volume + (oz * e.out_h + oy) * e.out_w + ox;
          if (indices[o] == flat) g = __fadd_rn(g, dy[o]);
        }
      }
    }
    dx[n] = g;
  }
}

// ---- softmax cross-entropy
// -----------------------------------------------------------------------

__global__ void cross_entropy_loss_kernel(std::int64_t rows, std::int64_t classes,
                                          const float* log_probs, const std::int64_t* labels,
                                          float* loss) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  bool bad = false;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t label = labels[r];
    if (label < 0 || label >= classes) {
      bad = true;
    } else {
      sum -= static_cast<double>(log_probs[r * classes + label]);
    }
  }
  partial[threadIdx.x] = bad ? nan("") : sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(partial[0] / static_cast<double>(rows));
}

__global__ void cross_entropy_backward_kernel(std::int64_t rows, std::int64_t classes,
                                              const float* probs, const std::int64_t* labels,
                                              float* dlogits) {
  const float inv = 1.0f / static_cast<float>(rows);
  MEMPLAN_GRID_STRIDE(k, rows * classes) {
    const std::int64_t r = k / classes;
    const std::int64_t c = k % classes;
    dlogits[k] = __fmul_rn(__fsub_rn(probs[k], c == labels[r] ? 1.0f : 0.0f), inv);
  }
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

// ---- SGD
// ------------------------------------------------------------------------------------------

__global__ void sgd_momentum_kernel(std::int64_t n, float lr, float momentum, float weight_decay,
                                    float* w, const float* grad, float* velocity) {
  // Rounded operations, no fused multiply-add: the host backend's arithmetic, bit for bit.
  MEMPLAN_GRID_STRIDE(i, n) {
    const float g = __fadd_rn(grad[i], __fmul_rn(weight_decay, w[i]));
    const float v = __fadd_rn(__fmul_rn(momentum, velocity[i]), g);
    velocity[i] = v;
    w[i] = __fsub_rn(w[i], __fmul_rn(lr, v));
  }
}

// ---- Adam
// -----------------------------------------------------------------------------------------

__global__ void adam_kernel(std::int64_t n, AdamScalars a, float* w, const float* grad,
                            float* exp_avg, float* exp_avg_sq) {
  // Rounded operations, no fused multiply-add: runtime::adam_update's arithmetic, bit for bit.
  MEMPLAN_GRID_STRIDE(i, n) {
    float g = grad[i];
    if (a.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(a.weight_decay, w[i]));
    const float m = __fadd_rn(exp_avg[i], __fmul_rn(a.beta1_weight, __fsub_rn(g, exp_avg[i])));
    exp_avg[i] = m;
    const float v =
        __fadd_rn(__fmul_rn(exp_avg_sq[i], a.beta2), __fmul_rn(__fmul_rn(a.beta2_weight, g), g));
    exp_avg_sq[i] = v;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bias_correction2_sqrt), a.eps);
    w[i] = __fadd_rn(w[i], __fdiv_rn(__fmul_rn(a.neg_step_size, m), denom));
  }
}

// ---- binarize
// -------------------------------------------------------------------------------------

__global__ void binarize_encode_kernel(std::int64_t n, const float* x, std::uint8_t* bits) {
  MEMPLAN_GRID_STRIDE(byte, (n + 7) / 8) {
    unsigned v = 0;
    for (int b = 0; b < 8; ++b) {
      const std::int64_t i = byte * 8 + b;
      if (i < n && x[i] > 0.0f) v |= 1u << b;
    }
    bits[byte] = static_cast<std::uint8_t>(v);
  }
}

__global__ void binarize_decode_kernel(std::int64_t n, const std::uint8_t* bits, float* x) {
  MEMPLAN_GRID_STRIDE(i, n) {
    x[i] = ((bits[i / 8] >> (i % 8)) & 1u) != 0 ? 1.0f : 0.0f;
  }
}

// ---- sparse
// ---------------------------------------------------------------------------------------

__device__ bool kept(float v) {
  return !(v == 0.0f && !signbit(v));  // -0.0 is kept so that decoding is bitwise exact
}

__global__ void sparse_count_kernel(std::int64_t n, const float* x, std::int64_t* counts) {
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    const std::int64_t end = min(n, (k + 1) * kSparseBlock);
    std::int64_t c = 0;
    for (std::int64_t i = k * kSparseBlock; i < end; ++i) c += kept(x[i]) ? 1 : 0;
    counts[k] = c;
  }
}

/// One thread: the byte offset of every block, and whether the whole fits.
__global__ void sparse_offsets_kernel(std::int64_t blocks, const std::int64_t* counts,
                                      std::int64_t* offsets, std::int64_t capacity, int* overflow) {
  std::int64_t pos = 0;
  for (std::int64_t k = 0; k < blocks; ++k) {
    offsets[k] = pos;
    pos += 2 + 5 * counts[k];
  }
  *overflow = pos > capacity ? 1 : 0;
}

__global__ void sparse_write_kernel(std::int64_t n, const float* x, const std::int64_t* counts,
                                    const std::int64_t* offsets, const int* overflow,
                                    std::uint8_t* out) {
  if (*overflow != 0) return;
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    std::uint8_t* p = out + offsets[k];
    const auto count = static_cast<unsigned>(counts[k]);
    p[0] = static_cast<std::uint8_t>(count & 0xffu);  // little-endian 16-bit count
    p[1] = static_cast<std::uint8_t>(count >> 8);
    p += 2;
    const std::int64_t start = k * kSparseBlock;
    const std::int64_t end = min(n, start + kSparseBlock);
    for (std::int64_t i = start; i < end; ++i) {
      if (!kept(x[i])) continue;
      const unsigned bits = __float_as_uint(x[i]);
      p[0] = static_cast<std::uint8_t>(i - start);
      for (int b = 0; b < 4; ++b) p[1 + b] = static_cast<std::uint8_t>(bits >> (8 * b));
      p += 5;
    }
  }
}

__global__ void zero_kernel(std::int64_t n, float* x) {
  MEMPLAN_GRID_STRIDE(i, n) {
    x[i] = 0.0f;
  }
}

/// One thread: where each block starts in the packed stream (its counts are in the stream).
__global__ void sparse_read_offsets_kernel(std::int64_t blocks, const std::uint8_t* in,
                                           std::int64_t* offsets) {
  std::int64_t pos = 0;
  for (std::int64_t k = 0; k < blocks; ++k) {
    offsets[k] = pos;
    const unsigned count = in[pos] | (static_cast<unsigned>(in[pos + 1]) << 8);
    pos += 2 + 5 * static_cast<std::int64_t>(count);
  }
}

__global__ void sparse_scatter_kernel(std::int64_t n, const std::uint8_t* in,
                                      const std::int64_t* offsets, float* x) {
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    const std::uint8_t* p = in + offsets[k];
    const unsigned count = p[0] | (static_cast<unsigned>(p[1]) << 8);
    p += 2;
    for (unsigned c = 0; c < count; ++c, p += 5) {
      unsigned bits = 0;
      for (int b = 0; b < 4; ++b) bits |= static_cast<unsigned>(p[1 + b]) << (8 * b);
      x[k * kSparseBlock + p[0]] = __uint_as_float(bits);
    }
  }
}

// ---- narrow floats (host_backend::narrow_encode_value / narrow_decode_value)
// ---------------------

__device__ unsigned narrow_code(int exponent_bits, int mantissa_bits, float value) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const unsigned exp_all_ones = (1u << exponent_bits) - 1;
  const unsigned sign = signbit(value) ? 1u << (total - 1) : 0u;
  if (isnan(value)) return (exp_all_ones << mantissa_bits) | 1u;
  if (isinf(value)) return sign | (exp_all_ones << mantissa_bits);
  const double a = fabs(static_cast<double>(value));
  if (a == 0.0) return sign;
  const int min_exponent = 1 - bias;
  const int max_exponent = bias;
  const double max_finite = ldexp(2.0 - ldexp(1.0, -mantissa_bits), max_exponent);
  int exponent = max(ilogb(a), min_exponent);
  const double quantum = ldexp(1.0, exponent - mantissa_bits);
  double q = rint(a / quantum) * quantum;  // nearest, ties to even; exact in double
  if (q > max_finite) q = max_finite;
  if (q == 0.0) return sign;
  const int e = ilogb(q);
  unsigned exponent_field = 0;
  unsigned mantissa = 0;
  if (e < min_exponent) {
    mantissa = static_cast<unsigned>(ldexp(q, mantissa_bits - min_exponent));
  } else {
    exponent_field = static_cast<unsigned>(e + bias);
    mantissa = static_cast<unsigned>(ldexp(q, mantissa_bits - e)) - (1u << mantissa_bits);
  }
  return sign | (exponent_field << mantissa_bits) | mantissa;
}

__device__ float narrow_value(int exponent_bits, int mantissa_bits, unsigned code) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const unsigned exp_all_ones = (1u << exponent_bits) - 1;
  const bool negative = ((code >> (total - 1)) & 1u) != 0;
  const unsigned exponent_field = (code >> mantissa_bits) & exp_all_ones;
  const unsigned mantissa = code & ((1u << mantissa_bits) - 1);
  double v = 0.0;
  if (exponent_field == exp_all_ones) {
    v = mantissa != 0 ? nan("") : INFINITY;
  } else if (exponent_field == 0) {
    v = ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    v = ldexp(static_cast<double>(mantissa + (1u << mantissa_bits)),
              static_cast<int>(exponent_field) - bias - mantissa_bits);
  }
  return static_cast<float>(negative ? -v : v);
}

/// One thread per output byte: it gathers the bits of the (at most two) values overlapping it.
__global__ void narrow_encode_kernel(int exponent_bits, int mantissa_bits, std::int64_t n,
                                     const float* x, std::uint8_t* out) {
  const int width = 1 + exponent_bits + mantissa_bits;
  MEMPLAN_GRID_STRIDE(byte, (n * width + 7) / 8) {
    unsigned v = 0;
    std::int64_t cached = -1;
    unsigned code = 0;
    for (int b = 0; b < 8; ++b) {
      const std::int64_t bit = byte * 8 + b;
      const std::int64_t i = bit / width;
      if (i >= n) break;
      if (i != cached) {
        code = narrow_code(exponent_bits, mantissa_bits, x[i]);
        cached = i;
      }
      if (((code >> (bit % width)) & 1u) != 0) v |= 1u << b;
    }
    out[byte] = static_cast<std::uint8_t>(v);
  }
}

__global__ void narrow_decode_kernel(int exponent_bits, int mantissa_bits, std::int64_t n,
                                     const std::uint8_t* in, float* x) {
  const int width = 1 + exponent_bits + mantissa_bits;
  MEMPLAN_GRID_STRIDE(i, n) {
    unsigned code = 0;
    for (int b = 0; b < width; ++b) {
      const std::int64_t bit = i * width + b;
      code |= static_cast<unsigned>((in[bit / 8] >> (bit % 8)) & 1u) << b;
    }
    x[i] = narrow_value(exponent_bits, mantissa_bits, code);
  }
}

}  // namespace

cudaError_t add(cudaStream_t s, std::int64_t n, const float* a, const float* b, float* y) {
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, a, b, y);
  return cudaGetLastError();
}

cudaError_t add_bias_rows(cudaStream_t s, std::int64_t rows, std::int64_t cols, const float* bias,
                          float* y) {
  add_bias_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(rows, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t column_sums(cudaStream_t s, std::int64_t rows, std::int64_t cols, const float* dy,
                        float* sums) {
  column_sums_kernel<<<blocks_for(cols), kThreads, 0, s>>>(rows, cols, dy, sums);
  return cudaGetLastError();
}

cudaError_t relu6_forward(cudaStream_t s, std::int64_t n, const float* x, float* y) {
  relu6_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t relu6_backward(cudaStream_t s, std::int64_t n, const float* dy, const float* y,
                           float* dx) {
  relu6_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, dy, y, dx);
  return cudaGetLastError();
}

cudaError_t dropout_forward(cudaStream_t s, std::int64_t n, std::uint64_t threshold, float scale,
                            std::uint64_t seed, const float* x, float* y, std::uint8_t* mask) {
  dropout_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, threshold, scale, seed, x, y, mask);
  return cudaGetLastError();
}

cudaError_t dropout_backward(cudaStream_t s, std::int64_t n, float scale, const float* dy,
                             const std::uint8_t* mask, float* dx) {
  dropout_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, scale, dy, mask, dx);
  return cudaGetLastError();
}

cudaError_t adaptive_avg_pool_forward(cudaStream_t s, const AdaptiveExtents& e, const float* x,
                                      float* y) {
  adaptive_forward_kernel<<<blocks_for(e.planes * e.out_d * e.out_h * e.out_w), kThreads, 0, s>>>(
      e, x, y);
  return cudaGetLastError();
}

cudaError_t adaptive_avg_pool_backward(cudaStream_t s, const AdaptiveExtents& e, const float* dy,
                                       float* dx) {
  adaptive_backward_kernel<<<blocks_for(e.planes * e.in_d * e.in_h * e.in_w), kThreads, 0, s>>>(
      e, dy, dx);
  return cudaGetLastError();
}

cudaError_t max_pool_forward(cudaStream_t s, const PoolExtents& e, const float* x, float* y,
                             std::int64_t* indices) {
  max_pool_forward_kernel<<<blocks_for(e.planes * e.out_d * e.out_h * e.out_w), kThreads, 0, s>>>(
      e, x, y, indices);
  return cudaGetLastError();
}

cudaError_t max_pool_backward(cudaStream_t s, const PoolExtents& e, const float* dy,
                              const std::int64_t* indices, float* dx) {
  max_pool_backward_kernel<<<blocks_for(e.planes * e.in_d * e.in_h * e.in_w), kThreads, 0, s>>>(
      e, dy, indices, dx);
  return cudaGetLastError();
}

cudaError_t cross_entropy_loss(cudaStream_t s, std::int64_t rows, std::int64_t classes,
                               const float* log_probs, const std::int64_t* labels, float* loss) {
  cross_entropy_loss_kernel<<<1, kThreads, 0, s>>>(rows, classes, log_probs, labels, loss);
  return cudaGetLastError();
}

cudaError_t cross_entropy_backward(cudaStream_t s, std::int64_t rows, std::int64_t classes,
                                   const float* probs, const std::int64_t* labels, float* dlogits) {
  cross_entropy_backward_kernel<<<blocks_for(rows * classes), kThreads, 0, s>>>(
      rows, classes, probs, labels, dlogits);
  return cudaGetLastError();
}

cudaError_t sgd_momentum(cudaStream_t s, std::int64_t n, float lr, float momentum,
                         float weight_decay, float* w, const float* grad, float* velocity) {
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, lr, momentum, weight_decay, w, grad,
                                                         velocity);
  return cudaGetLastError();
}

cudaError_t adam(cudaStream_t s, std::int64_t n, const AdamScalars& a, float* w, const float* grad,
                 float* exp_avg, float* exp_avg_sq) {
  adam_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, a, w, grad, exp_avg, exp_avg_sq);
  return cudaGetLastError();
}

cudaError_t binarize_encode(cudaStream_t s, std::int64_t n, const float* x, std::uint8_t* bits) {
  binarize_encode_kernel<<<blocks_for((n + 7) / 8), kThreads, 0, s>>>(n, x, bits);
  return cudaGetLastError();
}

cudaError_t binarize_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* bits, float* x) {
  binarize_decode_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, bits, x);
  return cudaGetLastError();
}

std::int64_t sparse_scratch_bytes(std::int64_t n) {
  return 2 * ((n + kSparseBlock - 1) / kSparseBlock) *
         static_cast<std::int64_t>(sizeof(std::int64_t));
}

cudaError_t sparse_encode(cudaStream_t s, std::int64_t n, const float* x, std::uint8_t* out,
                          std::int64_t capacity, void* scratch, int* overflow) {
  const std::int64_t blocks = (n + kSparseBlock - 1) / kSparseBlock;
  auto* counts = static_cast<std::int64_t*>(scratch);
  std::int64_t* offsets = counts + blocks;
  sparse_count_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, x, counts);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_offsets_kernel<<<1, 1, 0, s>>>(blocks, counts, offsets, capacity, overflow);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_write_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, x, counts, offsets, overflow, out);
  return cudaGetLastError();
}

cudaError_t sparse_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* in, float* x,
                          void* scratch) {
  const std::int64_t blocks = (n + kSparseBlock - 1) / kSparseBlock;
  auto* offsets = static_cast<std::int64_t*>(scratch);
  zero_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, x);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_read_offsets_kernel<<<1, 1, 0, s>>>(blocks, in, offsets);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_scatter_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, in, offsets, x);
  return cudaGetLastError();
}

cudaError_t narrow_encode(cudaStream_t s, int exponent_bits, int mantissa_bits, std::int64_t n,
                          const float* x, std::uint8_t* out) {
  const std::int64_t bytes = (n * (1 + exponent_bits + mantissa_bits) + 7) / 8;
  narrow_encode_kernel<<<blocks_for(bytes), kThreads, 0, s>>>(exponent_bits, mantissa_bits, n, x,
                                                              out);
  return cudaGetLastError();
}

cudaError_t narrow_decode(cudaStream_t s, int exponent_bits, int mantissa_bits, std::int64_t n,
                          const std::uint8_t* in, float* x) {
  narrow_decode_kernel<<<blocks_for(n), kThreads, 0, s>>>(exponent_bits, mantissa_bits, n, in, x);
  return cudaGetLastError();
}

}  // namespace memplan::cuda_backend::kernels

namespace memplan::cuda_backend::kernels {

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
