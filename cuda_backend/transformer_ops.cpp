// The transformer's layers on CUDA, forward and backward: layer-norm, GELU, embedding, and
// attention's scores and context over a fused qkv, all this backend's own kernels (kernels.cuh)
// with the host backend's semantics and order of summation (host_backend/transformer_kernels.hpp).
#include <cstdint>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_ops.hpp"
#include "cuda_backend/kernels.cuh"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend::ops {

namespace {

using runtime::elements;
using runtime::f32;
using runtime::fail;
using runtime::i64;

/// Attention's extents from qkv [B, S, 3H] and scores [B, heads, S, S] (heads divide H).
kernels::AttentionExtents attention_extents(const sim::Op& op, const sim::Tensor& qkv,
                                            const sim::Tensor& scores) {
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0 || scores.shape.size() != 4) {
    fail(op, "attention reads qkv [B, S, 3H] and scores [B, heads, S, S]");
  }
  const kernels::AttentionExtents e{qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3, scores.shape[1]};
  if (e.batch <= 0 || e.sequence <= 0 || e.hidden <= 0 || e.heads <= 0 || e.hidden % e.heads != 0 ||
      scores.shape[0] != e.batch || scores.shape[2] != e.sequence ||
      scores.shape[3] != e.sequence) {
    fail(op, "attention: heads must divide the hidden size, scores must be [B, heads, S, S]");
  }
  return e;
}

}  // namespace

namespace fwd {

void layer_norm(const CudaCall& c) {
  // [x, w, b] -> [y, mean, rstd]
  if (c.in.size() != 3 || c.out.size() != 3)
    c.fail("layer_norm reads x, w, b, writes y, mean, rstd");
  const auto [rows, h] = c.rows_of(c.t_in(0));
  MEMPLAN_CUDA_CHECK(kernels::layer_norm_forward(c.stream, rows, h, c.attr_f("epsilon", 1e-5f),
                                                 f32(c.in[0]), f32(c.in[1]), f32(c.in[2]),
                                                 f32(c.out[0]), f32(c.out[1]), f32(c.out[2])));
}

void gelu(const CudaCall& c) {
  if (c.in.empty() || c.out.empty()) c.fail("gelu reads x, writes y");
  MEMPLAN_CUDA_CHECK(
      kernels::gelu_forward(c.stream, elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void embedding(const CudaCall& c) {
  // [indices, table] -> [y]
  const sim::Tensor& table = c.t_in(1);
  if (c.in.size() != 2 || c.out.empty() || table.shape.size() != 2) {
    c.fail("embedding reads indices and a 2-d table");
  }
  MEMPLAN_CUDA_CHECK(kernels::embedding_forward(c.stream, elements(c.t_in(0)), table.shape[1],
                                                table.shape[0], i64(c.in[0]), f32(c.in[1]),
                                                f32(c.out[0])));
}

void attention_scores(const CudaCall& c) {
  // [qkv] -> [scores]
  if (c.in.empty() || c.out.empty()) c.fail("attention_scores reads qkv, writes scores");
  MEMPLAN_CUDA_CHECK(kernels::attention_scores_forward(
      c.stream, attention_extents(c.op, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0])));
}

void attention_context(const CudaCall& c) {
  // [probs, qkv] -> [y]
  if (c.in.size() != 2 || c.out.empty()) c.fail("attention_context reads probs and qkv");
  MEMPLAN_CUDA_CHECK(
      kernels::attention_context_forward(c.stream, attention_extents(c.op, c.t_in(1), c.t_in(0)),
                                         f32(c.in[0]), f32(c.in[1]), f32(c.out[0])));
}

}  // namespace fwd

namespace bwd {

void layer_norm(const CudaCall& c) {
  // [dy, x, w, mean, rstd] -> [dx,] dw, db
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 3) {
    c.fail("layer_norm backward reads dy, x, w, mean, rstd, writes [dx,] dw, db");
  }
  const bool has_dx = c.out.size() == 3;
  const std::size_t k = has_dx ? 1 : 0;
  const auto [rows, h] = c.rows_of(c.t_in(1));
  MEMPLAN_CUDA_CHECK(kernels::layer_norm_backward(
      c.stream, rows, h, f32(c.in[1]), f32(c.in[2]), f32(c.in[3]), f32(c.in[4]), f32(c.in[0]),
      has_dx ? f32(c.out[0]) : nullptr, f32(c.out[k]), f32(c.out[k + 1])));
}

void gelu(const CudaCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("gelu backward reads dy and x, writes dx");
  MEMPLAN_CUDA_CHECK(kernels::gelu_backward(c.stream, elements(c.t_in(0)), f32(c.in[0]),
                                            f32(c.in[1]), f32(c.out[0])));
}

void embedding(const CudaCall& c) {
  // [dy, indices] -> [dtable]
  const sim::Tensor& table = c.t_out(0);
  if (c.in.size() != 2 || c.out.size() != 1 || table.shape.size() != 2) {
    c.fail("embedding backward reads dy and indices, writes the table's gradient");
  }
  MEMPLAN_CUDA_CHECK(kernels::embedding_backward(c.stream, elements(c.t_in(1)), table.shape[1],
                                                 table.shape[0], i64(c.in[1]), f32(c.in[0]),
                                                 f32(c.out[0])));
}

void attention_scores(const CudaCall& c) {
  // [dscores, qkv] -> [dqkv]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("attention_scores backward reads dy and qkv");
  MEMPLAN_CUDA_CHECK(
      kernels::attention_scores_backward(c.stream, attention_extents(c.op, c.t_in(1), c.t_in(0)),
                                         f32(c.in[0]), f32(c.in[1]), f32(c.out[0])));
}

void attention_context(const CudaCall& c) {
  // [dy, probs, qkv] -> [dprobs, dqkv]
  if (c.in.size() != 3 || c.out.size() != 2) {
    c.fail("attention_context backward reads dy, probs, qkv, writes dprobs, dqkv");
  }
  MEMPLAN_CUDA_CHECK(kernels::attention_context_backward(
      c.stream, attention_extents(c.op, c.t_in(2), c.t_in(1)), f32(c.in[0]), f32(c.in[1]),
      f32(c.in[2]), f32(c.out[0]), f32(c.out[1])));
}

}  // namespace bwd

}  // namespace memplan::cuda_backend::ops
