#include "host_backend/layer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <Eigen/Core>

#include "host_backend/matrix_product.hpp"

namespace memplan::host_backend {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;
using Vector = Eigen::Map<Eigen::VectorXf>;

// SplitMix64: a counter-based generator, so the dropout mask of an element does not depend on the
// order in which elements are visited or on how many threads visit them.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void relu_forward(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(std::int64_t n, const float* dy, const float* y, float* dx) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void relu6_forward(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], 0.0f), 6.0f);
}

void relu6_backward(std::int64_t n, const float* dy, const float* y, float* dx) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f && y[i] < 6.0f ? dy[i] : 0.0f;
}

void batch_norm_forward(const BatchNormShape& s, const float* x, const float* gamma,
                        const float* beta, float* y, float* save_mean, float* save_invstd) {
  const std::int64_t count = s.batch * s.spatial;
  for (std::int64_t c = 0; c < s.channels; ++c) {
    double sum = 0.0;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      sum += ConstVector(x + (n * s.channels + c) * s.spatial, s.spatial).cast<double>().sum();
    }
    const double mean = sum / static_cast<double>(count);
    double sq = 0.0;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      sq += (ConstVector(x + (n * s.channels + c) * s.spatial, s.spatial).cast<double>().array() -
             mean)
                .square()
                .sum();
    }
    const double var = sq / static_cast<double>(count);  // biased, as used for normalisation
    const auto invstd = static_cast<float>(1.0 / std::sqrt(var + s.epsilon));
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = invstd;
    const float scale = gamma[c] * invstd;
    const float shift = beta[c] - static_cast<float>(mean) * scale;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      const std::int64_t off = (n * s.channels + c) * s.spatial;
      Vector(y + off, s.spatial) =
          (ConstVector(x + off, s.spatial).array() * scale + shift).matrix();
    }
  }
}

void batch_norm_backward(const BatchNormShape& s, const float* x, const float* gamma,
                         const float* save_mean, const float* save_invstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta) {
  const auto count = static_cast<double>(s.batch * s.spatial);
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double mean = save_mean[c];
    const double invstd = save_invstd[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      const std::int64_t off = (n * s.channels + c) * s.spatial;
      const auto g = ConstVector(dy + off, s.spatial).cast<double>().array();
      const auto xhat = (ConstVector(x + off, s.spatial).cast<double>().array() - mean) * invstd;
      sum_dy += g.sum();
      sum_dy_xhat += (g * xhat).sum();
    }
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
    if (dx == nullptr) continue;
    const double k = gamma[c] * invstd;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      const std::int64_t off = (n * s.channels + c) * s.spatial;
      for (std::int64_t i = 0; i < s.spatial; ++i) {
        const double xhat = (x[off + i] - mean) * invstd;
        dx[off + i] =
            static_cast<float>(k * (dy[off + i] - sum_dy / count - xhat * sum_dy_xhat / count));
      }
    }
  }
}

void PoolShape::check() const {
  if (batch <= 0 || channels <= 0 || in_d <= 0 || in_h <= 0 || in_w <= 0 || kernel_d <= 0 ||
      kernel_h <= 0 || kernel_w <= 0 || stride_d <= 0 || stride_h <= 0 || stride_w <= 0 ||
      pad_d < 0 || pad_h < 0 || pad_w < 0 || out_d() <= 0 || out_h() <= 0 || out_w() <= 0) {
    throw std::invalid_argument("pooling: inconsistent extents");
  }
}

namespace {

// One walk over every window of every plane: visit(plane, output index within the plane, the
// window's first and one-past-last input coordinates clipped to the input (d, h, w), and its
// size clipped to the padded input, PyTorch's count_include_pad divisor).
struct Window {
  std::int64_t d0, d1, h0, h1, w0, w1;
  std::int64_t padded_size;
};

template <class Visit>
void pool_walk(const PoolShape& s, Visit visit) {
  s.check();
  const std::int64_t od = s.out_d(), oh = s.out_h(), ow = s.out_w();
  for (std::int64_t p = 0; p < s.batch * s.channels; ++p) {
    for (std::int64_t k = 0; k < od; ++k) {
      const std::int64_t d0 = k * s.stride_d - s.pad_d;
      const std::int64_t d1 = std::min(d0 + s.kernel_d, s.in_d + s.pad_d);
      for (std::int64_t i = 0; i < oh; ++i) {
        const std::int64_t h0 = i * s.stride_h - s.pad_h;
        const std::int64_t h1 = std::min(h0 + s.kernel_h, s.in_h + s.pad_h);
        for (std::int64_t j = 0; j < ow; ++j) {
          const std::int64_t w0 = j * s.stride_w - s.pad_w;
          const std::int64_t w1 = std::min(w0 + s.kernel_w, s.in_w + s.pad_w);
          Window win{std::max<std::int64_t>(d0, 0),    std::min(d1, s.in_d),
                     std::max<std::int64_t>(h0, 0),    std::min(h1, s.in_h),
                     std::max<std::int64_t>(w0, 0),    std::min(w1, s.in_w),
                     (d1 - d0) * (h1 - h0) * (w1 - w0)};
          visit(p, (k * oh + i) * ow + j, win);
        }
      }
    }
  }
}

}  // namespace

void max_pool_forward(const PoolShape& s, const float* x, float* y, std::int64_t* indices) {
  const std::int64_t volume = s.in_d * s.in_h * s.in_w;
  const std::int64_t out_volume = s.out_d() * s.out_h() * s.out_w();
  pool_walk(s, [&](std::int64_t p, std::int64_t o, const Window& win) {
    const float* in = x + p * volume;
    float best = -std::numeric_limits<float>::infinity();
    std::int64_t best_index = -1;
    for (std::int64_t d = win.d0; d < win.d1; ++d) {
      for (std::int64_t h = win.h0; h < win.h1; ++h) {
        for (std::int64_t w = win.w0; w < win.w1; ++w) {
          const std::int64_t at = (d * s.in_h + h) * s.in_w + w;
          const float v = in[at];
          if (best_index < 0 || v > best || std::isnan(v)) {
            best = v;
            best_index = at;
          }
        }
      }
    }
    y[p * out_volume + o] = best;
    indices[p * out_volume + o] = best_index;
  });
}

void max_pool_backward(const PoolShape& s, const float* dy, const std::int64_t* indices,
                       float* dx) {
  s.check();
  const std::int64_t volume = s.in_d * s.in_h * s.in_w;
  const std::int64_t out_volume = s.out_d() * s.out_h() * s.out_w();
  std::fill(dx, dx + s.input_elements(), 0.0f);
  for (std::int64_t p = 0; p < s.batch * s.channels; ++p) {
    for (std::int64_t o = 0; o < out_volume; ++o) {
      dx[p * volume + indices[p * out_volume + o]] += dy[p * out_volume + o];
    }
  }
}

void avg_pool_forward(const PoolShape& s, const float* x, float* y) {
  const std::int64_t volume = s.in_d * s.in_h * s.in_w;
  const std::int64_t out_volume = s.out_d() * s.out_h() * s.out_w();
  pool_walk(s, [&](std::int64_t p, std::int64_t o, const Window& win) {
    const float* in = x + p * volume;
    float sum = 0.0f;
    for (std::int64_t d = win.d0; d < win.d1; ++d) {
      for (std::int64_t h = win.h0; h < win.h1; ++h) {
        for (std::int64_t w = win.w0; w < win.w1; ++w) sum += in[(d * s.in_h + h) * s.in_w + w];
      }
    }
    y[p * out_volume + o] = sum * (1.0f / static_cast<float>(win.padded_size));
  });
}

void avg_pool_backward(const PoolShape& s, const float* dy, float* dx) {
  const std::int64_t volume = s.in_d * s.in_h * s.in_w;
  const std::int64_t out_volume = s.out_d() * s.out_h() * s.out_w();
  std::fill(dx, dx + s.input_elements(), 0.0f);
  pool_walk(s, [&](std::int64_t p, std::int64_t o, const Window& win) {
    float* out = dx + p * volume;
    const float g = dy[p * out_volume + o] * (1.0f / static_cast<float>(win.padded_size));
    for (std::int64_t d = win.d0; d < win.d1; ++d) {
      for (std::int64_t h = win.h0; h < win.h1; ++h) {
        for (std::int64_t w = win.w0; w < win.w1; ++w) out[(d * s.in_h + h) * s.in_w + w] += g;
      }
    }
  });
}

namespace {
// PyTorch's adaptive pooling window along one axis: [floor(i*in/out), ceil((i+1)*in/out)).
std::int64_t window_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
std::int64_t window_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}
}  // namespace

void AdaptivePoolShape::check() const {
  if (planes <= 0 || in_d <= 0 || in_h <= 0 || in_w <= 0 || out_d <= 0 || out_h <= 0 ||
      out_w <= 0) {
    throw std::invalid_argument("adaptive pooling: extents must be positive");
  }
}

// One walk for both directions: `visit(input_index, output_index, 1 / window size)`.
template <class Visit>
void adaptive_walk(const AdaptivePoolShape& s, Visit visit) {
  s.check();
  const std::int64_t in_plane = s.in_d * s.in_h * s.in_w;
  const std::int64_t out_plane = s.out_d * s.out_h * s.out_w;
  for (std::int64_t p = 0; p < s.planes; ++p) {
    for (std::int64_t od = 0; od < s.out_d; ++od) {
      const std::int64_t d0 = window_start(od, s.in_d, s.out_d);
      const std::int64_t d1 = window_end(od, s.in_d, s.out_d);
      for (std::int64_t oh = 0; oh < s.out_h; ++oh) {
        const std::int64_t h0 = window_start(oh, s.in_h, s.out_h);
        const std::int64_t h1 = window_end(oh, s.in_h, s.out_h);
        for (std::int64_t ow = 0; ow < s.out_w; ++ow) {
          const std::int64_t w0 = window_start(ow, s.in_w, s.out_w);
          const std::int64_t w1 = window_end(ow, s.in_w, s.out_w);
          const std::int64_t o = p * out_plane + (od * s.out_h + oh) * s.out_w + ow;
          const float inv = 1.0f / static_cast<float>((d1 - d0) * (h1 - h0) * (w1 - w0));
          for (std::int64_t d = d0; d < d1; ++d) {
            for (std::int64_t h = h0; h < h1; ++h) {
              for (std::int64_t w = w0; w < w1; ++w) {
                visit(p * in_plane + (d * s.in_h + h) * s.in_w + w, o, inv);
              }
            }
          }
        }
      }
    }
  }
}

void adaptive_avg_pool_forward(const AdaptivePoolShape& s, const float* x, float* y) {
  std::fill(y, y + s.output_elements(), 0.0f);
  adaptive_walk(s, [&](std::int64_t i, std::int64_t o, float inv) { y[o] += x[i] * inv; });
}

void adaptive_avg_pool_backward(const AdaptivePoolShape& s, const float* dy, float* dx) {
  std::fill(dx, dx + s.input_elements(), 0.0f);
  adaptive_walk(s, [&](std::int64_t i, std::int64_t o, float inv) { dx[i] += dy[o] * inv; });
}

void linear_forward(std::int64_t n, std::int64_t in, std::int64_t out, const float* x,
                    const float* w, const float* b, float* y) {
  matrix_product({x, n, in}, {w, out, in, true}, y);
  if (b != nullptr) Map(y, n, out).rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, out);
}

void linear_backward(std::int64_t n, std::int64_t in, std::int64_t out, const float* x,
                     const float* w, const float* dy, float* dx, float* dw, float* db) {
  const ConstMap grad(dy, n, out);
  if (dx != nullptr) matrix_product({dy, n, out}, {w, out, in}, dx);
  matrix_product({dy, n, out, true}, {x, n, in}, dw);
  if (db != nullptr) Eigen::Map<Eigen::RowVectorXf>(db, out) = grad.colwise().sum();
}

void add_forward(std::int64_t n, const float* a, const float* b, float* y) {
  Vector(y, n) = ConstVector(a, n) + ConstVector(b, n);
}

void concat_forward(std::int64_t batch, std::int64_t spatial, int count,
                    const std::int64_t* channels, const float* const* parts, float* y) {
  std::int64_t total = 0;
  for (int i = 0; i < count; ++i) total += channels[i];
  for (std::int64_t n = 0; n < batch; ++n) {
    std::int64_t offset = 0;
    for (int i = 0; i < count; ++i) {
      const std::int64_t len = channels[i] * spatial;
      std::copy_n(parts[i] + n * len, len, y + (n * total + offset) * spatial);
      offset += channels[i];
    }
  }
}

void concat_backward(std::int64_t batch, std::int64_t spatial, int count,
                     const std::int64_t* channels, const float* dy, float* const* dparts) {
  std::int64_t total = 0;
  for (int i = 0; i < count; ++i) total += channels[i];
  for (std::int64_t n = 0; n < batch; ++n) {
    std::int64_t offset = 0;
    for (int i = 0; i < count; ++i) {
      const std::int64_t len = channels[i] * spatial;
      std::copy_n(dy + (n * total + offset) * spatial, len, dparts[i] + n * len);
      offset += channels[i];
    }
  }
}

void dropout_forward(std::int64_t n, float p, std::uint64_t seed, const float* x, float* y,
                     std::uint8_t* mask) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout: p must be in [0, 1)");
  const float scale = 1.0f / (1.0f - p);
  const auto threshold =
      static_cast<std::uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(i))) >= threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

void dropout_backward(std::int64_t n, float p, const float* dy, const std::uint8_t* mask,
                      float* dx) {
  const float scale = 1.0f / (1.0f - p);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] != 0 ? dy[i] * scale : 0.0f;
}

float softmax_cross_entropy_forward(std::int64_t n, std::int64_t classes, const float* logits,
                                    const std::int64_t* labels, float* probs) {
  double loss = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * classes;
    float* p = probs + i * classes;
    const float max = *std::max_element(row, row + classes);
    double sum = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - max));
    const double log_sum = std::log(sum);
    for (std::int64_t c = 0; c < classes; ++c) {
      p[c] = static_cast<float>(std::exp(static_cast<double>(row[c] - max) - log_sum));
    }
    if (labels[i] < 0 || labels[i] >= classes)
      throw std::invalid_argument("softmax cross-entropy: label out of range");
    loss -= static_cast<double>(row[labels[i]] - max) - log_sum;
  }
  return static_cast<float>(loss / static_cast<double>(n));
}

void softmax_cross_entropy_backward(std::int64_t n, std::int64_t classes, const float* probs,
                                    const std::int64_t* labels, float* dlogits) {
  const float inv = 1.0f / static_cast<float>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < classes; ++c) {
      dlogits[i * classes + c] = (probs[i * classes + c] - (c == labels[i] ? 1.0f : 0.0f)) * inv;
    }
  }
}

}  // namespace memplan::host_backend
