// The CUDA backend's kernels for the dense, element-wise, pooling and loss layers (kernels.cuh):
// add, bias rows and column sums, ReLU6, dropout, adaptive average pooling, max pooling with
// PyTorch's indices, and softmax cross-entropy, each summing in the host backend's order.
#include <cmath>
#include <cstdint>

#include "cuda_backend/kernel_launch.cuh"
#include "cuda_backend/kernels.cuh"

namespace memplan::cuda_backend::kernels {

namespace {

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

}  // namespace memplan::cuda_backend::kernels
