#include "host_backend/transformer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace memplan::host_backend {

void layer_norm_forward(std::int64_t rows, std::int64_t h, float epsilon, const float* x,
                        const float* w, const float* b, float* y, float* mean, float* rstd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    double sum = 0.0;
    for (std::int64_t i = 0; i < h; ++i) sum += xr[i];
    const double m = sum / static_cast<double>(h);
    double sq = 0.0;
    for (std::int64_t i = 0; i < h; ++i) sq += (xr[i] - m) * (xr[i] - m);
    const double var = sq / static_cast<double>(h);  // biased, as PyTorch normalises
    const auto rs = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(epsilon)));
    mean[r] = static_cast<float>(m);
    rstd[r] = rs;
    for (std::int64_t i = 0; i < h; ++i) y[r * h + i] = (xr[i] - mean[r]) * rs * w[i] + b[i];
  }
}

void layer_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* w,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dw, float* db) {
  std::fill(dw, dw + h, 0.0f);
  std::fill(db, db + h, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    const float* g = dy + r * h;
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (std::int64_t i = 0; i < h; ++i) {
      const float xhat = (xr[i] - mean[r]) * rstd[r];
      dw[i] += g[i] * xhat;
      db[i] += g[i];
      const double gw = static_cast<double>(g[i]) * w[i];
      sum_g += gw;
      sum_g_xhat += gw * xhat;
    }
    if (dx == nullptr) continue;
    const double n = static_cast<double>(h);
    for (std::int64_t i = 0; i < h; ++i) {
      const double xhat = (xr[i] - mean[r]) * rstd[r];
      const double gw = static_cast<double>(g[i]) * w[i];
      dx[r * h + i] = static_cast<float>(rstd[r] * (gw - sum_g / n - xhat * sum_g_xhat / n));
    }
  }
}

void gelu_forward(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  }
}

void gelu_backward(std::int64_t n, const float* dy, const float* x, float* dx) {
  const auto inv_sqrt_2pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
  for (std::int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
    const float pdf = inv_sqrt_2pi * std::exp(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

void softmax_forward(std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float top = *std::max_element(xr, xr + cols);
    double sum = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - top);
      sum += yr[c];
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (std::int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

void softmax_backward(std::int64_t rows, std::int64_t cols, const float* dy, const float* y,
                      float* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = dy + r * cols;
    const float* yr = y + r * cols;
    double dot = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) dot += static_cast<double>(g[c]) * yr[c];
    for (std::int64_t c = 0; c < cols; ++c) {
      dx[r * cols + c] = yr[c] * (g[c] - static_cast<float>(dot));
    }
  }
}

void embedding_forward(std::int64_t n, std::int64_t dim, std::int64_t rows,
                       const std::int64_t* indices, const float* table, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = indices[i];
    if (row < 0 || row >= rows) {
      throw std::out_of_range("embedding: index " + std::to_string(row) + " outside the table's " +
                              std::to_string(rows) + " rows");
    }
    std::copy_n(table + row * dim, dim, y + i * dim);
  }
}

void embedding_backward(std::int64_t n, std::int64_t dim, std::int64_t rows,
                        const std::int64_t* indices, const float* dy, float* dtable) {
  std::fill(dtable, dtable + rows * dim, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = indices[i];
    if (row < 0 || row >= rows) throw std::out_of_range("embedding: index outside the table");
    for (std::int64_t c = 0; c < dim; ++c) dtable[row * dim + c] += dy[i * dim + c];
  }
}

void AttentionShape::check() const {
  if (batch <= 0 || sequence <= 0 || hidden <= 0 || heads <= 0 || hidden % heads != 0) {
    throw std::invalid_argument("attention: heads must divide the hidden size");
  }
}

namespace {
// Element c of head h of part (0 Q, 1 K, 2 V) of token t in batch b, within qkv [B, S, 3H].
std::int64_t qkv_at(const AttentionShape& s, std::int64_t b, std::int64_t t, int part,
                    std::int64_t h, std::int64_t c) {
  return (b * s.sequence + t) * 3 * s.hidden + part * s.hidden + h * s.head_dim() + c;
}
std::int64_t score_at(const AttentionShape& s, std::int64_t b, std::int64_t h, std::int64_t i,
                      std::int64_t j) {
  return ((b * s.heads + h) * s.sequence + i) * s.sequence + j;
}
}  // namespace

void attention_scores_forward(const AttentionShape& s, const float* qkv, float* scores) {
  s.check();
  const std::int64_t d = s.head_dim();
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.sequence; ++i) {
        for (std::int64_t j = 0; j < s.sequence; ++j) {
          float dot = 0.0f;
          if (j <= i) {
            for (std::int64_t c = 0; c < d; ++c) {
              dot += qkv[qkv_at(s, b, i, 0, h, c)] * qkv[qkv_at(s, b, j, 1, h, c)];
            }
          }
          scores[score_at(s, b, h, i, j)] =
              j <= i ? dot * scale : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
}

void attention_scores_backward(const AttentionShape& s, const float* dscores, const float* qkv,
                               float* dqkv) {
  s.check();
  const std::int64_t d = s.head_dim();
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::fill(dqkv, dqkv + s.batch * s.sequence * 3 * s.hidden, 0.0f);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.sequence; ++i) {
        for (std::int64_t j = 0; j <= i; ++j) {
          const float g = dscores[score_at(s, b, h, i, j)] * scale;
          for (std::int64_t c = 0; c < d; ++c) {
            dqkv[qkv_at(s, b, i, 0, h, c)] += g * qkv[qkv_at(s, b, j, 1, h, c)];
            dqkv[qkv_at(s, b, j, 1, h, c)] += g * qkv[qkv_at(s, b, i, 0, h, c)];
          }
        }
      }
    }
  }
}

void attention_context_forward(const AttentionShape& s, const float* probs, const float* qkv,
                               float* y) {
  s.check();
  const std::int64_t d = s.head_dim();
  std::fill(y, y + s.batch * s.sequence * s.hidden, 0.0f);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.sequence; ++i) {
        float* out = y + (b * s.sequence + i) * s.hidden + h * d;
        for (std::int64_t j = 0; j < s.sequence; ++j) {
          const float p = probs[score_at(s, b, h, i, j)];
          for (std::int64_t c = 0; c < d; ++c) out[c] += p * qkv[qkv_at(s, b, j, 2, h, c)];
        }
      }
    }
  }
}

void attention_context_backward(const AttentionShape& s, const float* dy, const float* probs,
                                const float* qkv, float* dprobs, float* dqkv) {
  s.check();
  const std::int64_t d = s.head_dim();
  std::fill(dqkv, dqkv + s.batch * s.sequence * 3 * s.hidden, 0.0f);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.sequence; ++i) {
        const float* g = dy + (b * s.sequence + i) * s.hidden + h * d;
        for (std::int64_t j = 0; j < s.sequence; ++j) {
          float dot = 0.0f;
          const float p = probs[score_at(s, b, h, i, j)];
          for (std::int64_t c = 0; c < d; ++c) {
            dot += g[c] * qkv[qkv_at(s, b, j, 2, h, c)];
            dqkv[qkv_at(s, b, j, 2, h, c)] += p * g[c];
          }
          dprobs[score_at(s, b, h, i, j)] = dot;
        }
      }
    }
  }
}

}  // namespace memplan::host_backend
