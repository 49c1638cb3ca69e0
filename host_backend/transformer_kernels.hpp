#pragma once
// The transformer's layers on the host, forward and backward, as the zoo's GPT-style decoder uses
// them (zoo/transformer.cpp, Note [Saved tensors] in zoo/network.hpp): layer-norm over the last
// axis, GELU (erf form, PyTorch's default), softmax over the last axis, embedding lookup, and
// attention split in two ops over a fused QKV buffer [B, S, 3H] (Q, K, V side by side, head h in
// columns h·d .. (h+1)·d of each, d = H / heads): scores = Q·Kᵀ/√d with the causal mask (-inf
// above the diagonal) → [B, heads, S, S], and context = P·V with heads merged → [B, S, H].
// Deterministic: same inputs, same bits.
#include <cstdint>

namespace memplan::host_backend {

/// y = (x - mean) · rstd · w + b per row of `h`; writes the saved mean and rstd per row.
void layer_norm_forward(std::int64_t rows, std::int64_t h, float epsilon, const float* x,
                        const float* w, const float* b, float* y, float* mean, float* rstd);
/// dx (when not null), dw and db (overwritten) from the saved input, mean and rstd.
void layer_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* w,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dw, float* db);

/// y = x · Φ(x) (erf form); the backward reads x, as PyTorch's GeluBackward does.
void gelu_forward(std::int64_t n, const float* x, float* y);
void gelu_backward(std::int64_t n, const float* dy, const float* x, float* dx);

/// Softmax over rows of `cols` (-inf entries give 0); the backward reads the output.
void softmax_forward(std::int64_t rows, std::int64_t cols, const float* x, float* y);
void softmax_backward(std::int64_t rows, std::int64_t cols, const float* dy, const float* y,
                      float* dx);

/// y[i] = table[indices[i]] (rows of `dim`); throws std::out_of_range for an index outside the
/// table's `rows`. The backward sums dy rows into dtable (overwritten) in index order.
void embedding_forward(std::int64_t n, std::int64_t dim, std::int64_t rows,
                       const std::int64_t* indices, const float* table, float* y);
void embedding_backward(std::int64_t n, std::int64_t dim, std::int64_t rows,
                        const std::int64_t* indices, const float* dy, float* dtable);

struct AttentionShape {
  std::int64_t batch = 1, sequence = 1, hidden = 1, heads = 1;
  [[nodiscard]] std::int64_t head_dim() const { return hidden / heads; }
  void check() const;  // throws std::invalid_argument (heads must divide hidden)
};
/// scores [B, heads, S, S] from qkv [B, S, 3H].
void attention_scores_forward(const AttentionShape& s, const float* qkv, float* scores);
/// dqkv (overwritten): the Q and K parts from dscores; the V part is zero (context gives it).
void attention_scores_backward(const AttentionShape& s, const float* dscores, const float* qkv,
                               float* dqkv);
/// y [B, S, H] = P·V per head, heads merged.
void attention_context_forward(const AttentionShape& s, const float* probs, const float* qkv,
                               float* y);
/// dprobs (overwritten) and dqkv (overwritten): its V part; the Q and K parts are zero.
void attention_context_backward(const AttentionShape& s, const float* dy, const float* probs,
                                const float* qkv, float* dprobs, float* dqkv);

}  // namespace memplan::host_backend
