#include "host_backend/op_executor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "host_backend/conv_kernels.hpp"
#include "host_backend/layer_kernels.hpp"
#include "host_backend/transformer_kernels.hpp"
#include "runtime/backend_error.hpp"

namespace memplan::host_backend {

namespace {

using runtime::dropout_seed;
using runtime::elements;
using runtime::f32;
using runtime::i64;
using runtime::OpCall;

/// An op's call with the executor's scratch memory (convolution columns).
struct HostCall : OpCall {
  std::vector<float>* scratch_memory;
  [[nodiscard]] float* scratch(std::int64_t floats) const {
    if (scratch_memory->size() < static_cast<std::size_t>(floats)) {
      scratch_memory->resize(static_cast<std::size_t>(floats));
    }
    return scratch_memory->data();
  }
};

// out = the sum of the float tensors `in` (one input: a copy). The forward add and the backward
// accumulation of gradients are the same sum.
void sum_into(std::int64_t n, std::span<void* const> in, float* out) {
  if (in.size() == 1) {
    std::copy_n(f32(in[0]), n, out);
    return;
  }
  add_forward(n, f32(in[0]), f32(in[1]), out);
  for (std::size_t i = 2; i < in.size(); ++i) add_forward(n, out, f32(in[i]), out);
}

ConvShape conv_shape(const OpCall& c, const sim::Tensor& x, const sim::Tensor& w) {
  const std::size_t rank = c.op.layer.rule().spatial_dims == 3 ? 5 : 4;
  if (x.shape.size() != rank || w.shape.size() != rank) {
    c.fail(c.op.layer.str() + " needs " + std::to_string(rank) + "-d input and filter");
  }
  // Spatial attributes list D, H, W for conv3d and H, W for conv2d.
  const std::size_t d0 = rank == 5 ? 1 : 0;  // attribute index of H
  ConvShape s;
  s.batch = x.shape[0];
  s.in_channels = x.shape[1];
  s.out_channels = w.shape[0];
  s.groups = c.attr("groups", 0, 1);
  if (rank == 5) {
    s.in_d = x.shape[2];
    s.kernel_d = c.attr("kernel", 0, w.shape[2]);
    s.stride_d = c.attr("stride", 0, 1);
    s.pad_d = c.attr("padding", 0, 0);
  }
  s.in_h = x.shape[rank - 2];
  s.in_w = x.shape[rank - 1];
  s.kernel_h = c.attr("kernel", d0, w.shape[rank - 2]);
  s.kernel_w = c.attr("kernel", d0 + 1, w.shape[rank - 1]);
  s.stride_h = c.attr("stride", d0, 1);
  s.stride_w = c.attr("stride", d0 + 1, 1);
  s.pad_h = c.attr("padding", d0, 0);
  s.pad_w = c.attr("padding", d0 + 1, 0);
  try {
    s.check();
  } catch (const std::exception& e) {
    c.fail(e.what());
  }
  return s;
}

/// The window of a pooling op (2D, or 3D for the *_pool3d layers) over input `x`, with PyTorch's
/// ceil_mode, checked against its output `y`.
PoolShape pool_shape(const OpCall& c, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = c.op.layer.rule().spatial_dims == 3 ? 5 : 4;
  if (x.shape.size() != rank || y.shape.size() != rank) {
    c.fail(c.op.layer.str() + " needs " + std::to_string(rank) + "-d tensors");
  }
  const std::size_t h = rank == 5 ? 1 : 0;  // attribute index of H
  PoolShape s;
  s.batch = x.shape[0];
  s.channels = x.shape[1];
  if (rank == 5) {
    s.in_d = x.shape[2];
    s.kernel_d = c.attr("kernel", 0, 2);
    s.stride_d = c.attr("stride", 0, s.kernel_d);
    s.pad_d = c.attr("padding", 0, 0);
  }
  s.in_h = x.shape[rank - 2];
  s.in_w = x.shape[rank - 1];
  s.kernel_h = c.attr("kernel", h, 2);
  s.kernel_w = c.attr("kernel", h + 1, 2);
  s.stride_h = c.attr("stride", h, s.kernel_h);
  s.stride_w = c.attr("stride", h + 1, s.kernel_w);
  s.pad_h = c.attr("padding", h, 0);
  s.pad_w = c.attr("padding", h + 1, 0);
  s.ceil_mode = c.attr("ceil_mode", 0, 0) != 0;
  try {
    s.check();
  } catch (const std::exception& e) {
    c.fail(e.what());
  }
  if ((rank == 5 && s.out_d() != y.shape[2]) || s.out_h() != y.shape[rank - 2] ||
      s.out_w() != y.shape[rank - 1]) {
    c.fail("output extents differ from the window's");
  }
  return s;
}

/// Adaptive average pooling from input `x` [N, C, (D,) H, W] to output `y` of the same rank.
AdaptivePoolShape adaptive_shape(const OpCall& c, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = x.shape.size();
  if ((rank != 4 && rank != 5) || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    c.fail("adaptive_avg_pool maps [N, C, spatial...] to [N, C, spatial...] of rank 4 or 5");
  }
  AdaptivePoolShape s;
  s.planes = x.shape[0] * x.shape[1];
  if (rank == 5) {
    s.in_d = x.shape[2];
    s.out_d = y.shape[2];
  }
  s.in_h = x.shape[rank - 2];
  s.in_w = x.shape[rank - 1];
  s.out_h = y.shape[rank - 2];
  s.out_w = y.shape[rank - 1];
  return s;
}

BatchNormShape batch_norm_shape(const OpCall& c, const sim::Tensor& x) {
  if (x.shape.size() < 2) c.fail("batch_norm needs [N, C, ...] input");
  BatchNormShape s;
  s.batch = x.shape[0];
  s.channels = x.shape[1];
  s.spatial = elements(x) / (s.batch * s.channels);
  s.epsilon = c.attr_f("epsilon", 1e-5f);
  return s;
}

/// Dropout probability (attribute `p`, PyTorch's default 0.5).
float dropout_p(const OpCall& c) {
  return c.attr_f("p", 0.5f);
}

/// Channels of each part of a concat along dim 1, and the spatial extent they share.
void concat_extents(const OpCall& c, const std::vector<const sim::Tensor*>& parts,
                    std::vector<std::int64_t>& channels, std::int64_t& spatial) {
  channels.clear();
  spatial = -1;
  for (const sim::Tensor* t : parts) {
    if (t->shape.size() < 2) c.fail("concat parts are [N, C, ...]");
    const std::int64_t sp = elements(*t) / (t->shape[0] * t->shape[1]);
    if (spatial >= 0 && sp != spatial) c.fail("concat parts differ in spatial extents");
    spatial = sp;
    channels.push_back(t->shape[1]);
  }
}

/// Attention extents from the fused QKV tensor [B, S, 3H] and the heads of the scores tensor.
AttentionShape attention_shape(const OpCall& c, const sim::Tensor& qkv, const sim::Tensor& scores) {
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0 || scores.shape.size() != 4) {
    c.fail("attention reads qkv [B, S, 3H] and scores [B, heads, S, S]");
  }
  AttentionShape s;
  s.batch = qkv.shape[0];
  s.sequence = qkv.shape[1];
  s.hidden = qkv.shape[2] / 3;
  s.heads = scores.shape[1];
  try {
    s.check();
  } catch (const std::exception& e) {
    c.fail(e.what());
  }
  return s;
}

// Outputs of a linear or conv backward: [dx,] dw [, db] (OpCall::grad_outputs).
struct Grads {
  float* dx = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};
Grads grads(const OpCall& c) {
  const runtime::GradOutputs has = c.grad_outputs();
  Grads g;
  std::size_t i = 0;
  if (has.dx) g.dx = f32(c.out[i++]);
  g.dw = f32(c.out[i++]);
  if (has.db) g.db = f32(c.out[i]);
  return g;
}

namespace fwd {

void relu(const HostCall& c) {
  relu_forward(elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0]));
}

void relu6(const HostCall& c) {
  relu6_forward(elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0]));
}

void linear(const HostCall& c) {
  const sim::Tensor& w = c.t_in(1);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(0)) / w.shape[1];
  const float* bias = c.in.size() > 2 ? f32(c.in[2]) : nullptr;
  linear_forward(n, w.shape[1], w.shape[0], f32(c.in[0]), f32(c.in[1]), bias, f32(c.out[0]));
}

void batch_norm(const HostCall& c) {
  // [x, gamma, beta (, running stats)] -> [y, save_mean, save_invstd]
  if (c.in.size() < 3 || c.out.size() != 3) {
    c.fail("batch_norm reads x, weight, bias [, running stats], writes y, mean, invstd");
  }
  batch_norm_forward(batch_norm_shape(c, c.t_in(0)), f32(c.in[0]), f32(c.in[1]), f32(c.in[2]),
                     f32(c.out[0]), f32(c.out[1]), f32(c.out[2]));
}

/// Whether an average pool's window was recorded. PyTorch's avg_pool2d always has one; an
/// imported step records none (the profiler gives the extents only, and torchvision's
/// AdaptiveAvgPool2d reaches the importer as an average pool). Without it the pool is the one its
/// extents define: PyTorch's adaptive average pooling to the output size, the same sums as a window
/// of kernel = stride = input / output and no padding where that divides.
bool window_recorded(const HostCall& c) {
  return c.op.attributes.find("kernel") != c.op.attributes.end();
}

void avg_pool(const HostCall& c) {
  if (!window_recorded(c)) {
    adaptive_avg_pool_forward(adaptive_shape(c, c.t_in(0), c.t_out(0)), f32(c.in[0]),
                              f32(c.out[0]));
    return;
  }
  avg_pool_forward(pool_shape(c, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0]));
}

void adaptive_avg_pool(const HostCall& c) {
  adaptive_avg_pool_forward(adaptive_shape(c, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0]));
}

void dropout(const HostCall& c) {
  if (c.out.size() != 2) c.fail("dropout writes its output and its mask");
  try {
    dropout_forward(elements(c.t_in(0)), dropout_p(c), dropout_seed(c.op.id), f32(c.in[0]),
                    f32(c.out[0]), static_cast<std::uint8_t*>(c.out[1]));
  } catch (const std::invalid_argument& e) {
    c.fail(e.what());
  }
}

void concat(const HostCall& c) {
  std::vector<const sim::Tensor*> parts;
  std::vector<const float*> data;
  for (std::size_t i = 0; i < c.in.size(); ++i) {
    parts.push_back(&c.t_in(i));
    data.push_back(f32(c.in[i]));
  }
  std::vector<std::int64_t> channels;
  std::int64_t spatial = 0;
  concat_extents(c, parts, channels, spatial);
  concat_forward(c.t_in(0).shape[0], spatial, static_cast<int>(parts.size()), channels.data(),
                 data.data(), f32(c.out[0]));
}

void layer_norm(const HostCall& c) {
  // [x, w, b] -> [y, mean, rstd]
  if (c.in.size() != 3 || c.out.size() != 3)
    c.fail("layer_norm reads x, w, b, writes y, mean, rstd");
  const auto [rows, h] = c.rows_of(c.t_in(0));
  layer_norm_forward(rows, h, c.attr_f("epsilon", 1e-5f), f32(c.in[0]), f32(c.in[1]), f32(c.in[2]),
                     f32(c.out[0]), f32(c.out[1]), f32(c.out[2]));
}

void gelu(const HostCall& c) {
  gelu_forward(elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0]));
}

void softmax(const HostCall& c) {
  const auto [rows, cols] = c.rows_of(c.t_in(0));
  softmax_forward(rows, cols, f32(c.in[0]), f32(c.out[0]));
}

void embedding(const HostCall& c) {
  // [indices, table] -> [y]
  const sim::Tensor& table = c.t_in(1);
  if (c.in.size() != 2 || table.shape.size() != 2)
    c.fail("embedding reads indices and a 2-d table");
  try {
    embedding_forward(elements(c.t_in(0)), table.shape[1], table.shape[0], i64(c.in[0]),
                      f32(c.in[1]), f32(c.out[0]));
  } catch (const std::out_of_range& e) {
    c.fail(e.what());
  }
}

void attention_scores(const HostCall& c) {
  attention_scores_forward(attention_shape(c, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0]));
}

void attention_context(const HostCall& c) {
  // [probs, qkv] -> [y]
  if (c.in.size() != 2) c.fail("attention_context reads probs and qkv");
  attention_context_forward(attention_shape(c, c.t_in(1), c.t_in(0)), f32(c.in[0]), f32(c.in[1]),
                            f32(c.out[0]));
}

void conv(const HostCall& c) {
  const ConvShape s = conv_shape(c, c.t_in(0), c.t_in(1));
  const float* bias = c.in.size() > 2 ? f32(c.in[2]) : nullptr;
  conv_forward(s, f32(c.in[0]), f32(c.in[1]), bias, f32(c.out[0]),
               c.scratch(s.workspace_elements()));
}

void max_pool(const HostCall& c) {
  if (c.out.size() != 2) c.fail(c.op.layer.str() + " writes its output and its indices");
  max_pool_forward(pool_shape(c, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0]),
                   i64(c.out[1]));
}

void add(const HostCall& c) {
  if (c.in.empty()) c.fail("add needs inputs");
  sum_into(elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax_cross_entropy(const HostCall& c) {
  if (c.out.size() != 2) c.fail("softmax_cross_entropy writes the loss and the probabilities");
  // Classes on the last axis; every other position is one sample (a sequence's tokens too).
  const auto [n, classes] = c.rows_of(c.t_in(0));
  *f32(c.out[0]) =
      softmax_cross_entropy_forward(n, classes, f32(c.in[0]), i64(c.in[1]), f32(c.out[1]));
}

}  // namespace fwd

namespace bwd {

void relu(const HostCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu backward reads dy and y, writes dx");
  relu_backward(elements(c.t_in(0)), f32(c.in[0]), f32(c.in[1]), f32(c.out[0]));
}

void relu6(const HostCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu6 backward reads dy and y, writes dx");
  relu6_backward(elements(c.t_in(0)), f32(c.in[0]), f32(c.in[1]), f32(c.out[0]));
}

void linear(const HostCall& c) {
  // [dy, x, w] -> [dx,] dw [, db] (no dx when x needs no gradient)
  const Grads g = grads(c);
  const sim::Tensor& w = c.t_in(2);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(1)) / w.shape[1];
  linear_backward(n, w.shape[1], w.shape[0], f32(c.in[1]), f32(c.in[2]), f32(c.in[0]), g.dx, g.dw,
                  g.db);
}

void batch_norm(const HostCall& c) {
  // [dy, x, gamma, save_mean, save_invstd] -> [dx,] dgamma, dbeta [, d running stats]. The zoo
  // marks the running statistics trainable and gives them a gradient tensor: the loss of a
  // training step does not depend on them (they are only written), so that gradient is zero.
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 4) {
    c.fail("batch_norm backward reads dy, x, weight, mean, invstd, writes [dx,] dw, db");
  }
  const bool has_dx = c.t_out(0).shape == c.t_in(1).shape;
  const std::size_t k = has_dx ? 1 : 0;
  if (c.out.size() < k + 2) c.fail("batch_norm backward writes [dx,] dw, db");
  batch_norm_backward(batch_norm_shape(c, c.t_in(1)), f32(c.in[1]), f32(c.in[2]), f32(c.in[3]),
                      f32(c.in[4]), f32(c.in[0]), has_dx ? f32(c.out[0]) : nullptr, f32(c.out[k]),
                      f32(c.out[k + 1]));
  if (c.out.size() == k + 3) std::fill_n(f32(c.out[k + 2]), elements(c.t_out(k + 2)), 0.0f);
  if (c.out.size() > k + 3) c.fail("batch_norm backward writes [dx,] dw, db [, d running]");
}

void avg_pool(const HostCall& c) {
  // [dy (, x)] -> [dx]: x's values are not read (PyTorch's avg_pool2d_backward takes it for its
  // shape, which dx has), so an imported backward that reads dy alone runs too.
  if (c.in.empty() || c.in.size() > 2 || c.out.size() != 1) {
    c.fail(c.op.layer.str() + " backward reads dy (and x), writes dx");
  }
  if (!fwd::window_recorded(c)) {
    adaptive_avg_pool_backward(adaptive_shape(c, c.t_out(0), c.t_in(0)), f32(c.in[0]),
                               f32(c.out[0]));
    return;
  }
  avg_pool_backward(pool_shape(c, c.t_out(0), c.t_in(0)), f32(c.in[0]), f32(c.out[0]));
}

void adaptive_avg_pool(const HostCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("adaptive_avg_pool backward reads dy and x");
  adaptive_avg_pool_backward(adaptive_shape(c, c.t_out(0), c.t_in(0)), f32(c.in[0]), f32(c.out[0]));
}

void dropout(const HostCall& c) {
  // [dy, mask] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("dropout backward reads dy and the mask");
  dropout_backward(elements(c.t_in(0)), dropout_p(c), f32(c.in[0]),
                   static_cast<const std::uint8_t*>(c.in[1]), f32(c.out[0]));
}

void concat(const HostCall& c) {
  // [dy] -> the gradient of every part (all parts must need one: the split is by position)
  if (c.in.size() != 1) c.fail("concat backward reads dy");
  if (c.op.differentiates == sim::kNoOp ||
      c.workload.op(c.op.differentiates).inputs.size() != c.out.size()) {
    c.fail("concat backward must write the gradient of every part of its forward op");
  }
  std::vector<const sim::Tensor*> parts;
  std::vector<float*> data;
  for (std::size_t i = 0; i < c.out.size(); ++i) {
    parts.push_back(&c.t_out(i));
    data.push_back(f32(c.out[i]));
  }
  std::vector<std::int64_t> channels;
  std::int64_t spatial = 0;
  concat_extents(c, parts, channels, spatial);
  concat_backward(c.t_in(0).shape[0], spatial, static_cast<int>(parts.size()), channels.data(),
                  f32(c.in[0]), data.data());
}

void layer_norm(const HostCall& c) {
  // [dy, x, w, mean, rstd] -> [dx,] dw, db
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 3) {
    c.fail("layer_norm backward reads dy, x, w, mean, rstd, writes [dx,] dw, db");
  }
  const bool has_dx = c.out.size() == 3;
  const std::size_t k = has_dx ? 1 : 0;
  const auto [rows, h] = c.rows_of(c.t_in(1));
  layer_norm_backward(rows, h, f32(c.in[1]), f32(c.in[2]), f32(c.in[3]), f32(c.in[4]), f32(c.in[0]),
                      has_dx ? f32(c.out[0]) : nullptr, f32(c.out[k]), f32(c.out[k + 1]));
}

void gelu(const HostCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("gelu backward reads dy and x, writes dx");
  gelu_backward(elements(c.t_in(0)), f32(c.in[0]), f32(c.in[1]), f32(c.out[0]));
}

void softmax(const HostCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("softmax backward reads dy and y, writes dx");
  const auto [rows, cols] = c.rows_of(c.t_in(1));
  softmax_backward(rows, cols, f32(c.in[0]), f32(c.in[1]), f32(c.out[0]));
}

void embedding(const HostCall& c) {
  // [dy, indices] -> [dtable]
  const sim::Tensor& table = c.t_out(0);
  if (c.in.size() != 2 || c.out.size() != 1 || table.shape.size() != 2) {
    c.fail("embedding backward reads dy and indices, writes the table's gradient");
  }
  try {
    embedding_backward(elements(c.t_in(1)), table.shape[1], table.shape[0], i64(c.in[1]),
                       f32(c.in[0]), f32(c.out[0]));
  } catch (const std::out_of_range& e) {
    c.fail(e.what());
  }
}

void attention_scores(const HostCall& c) {
  // [dscores, qkv] -> [dqkv]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("attention_scores backward reads dy and qkv");
  attention_scores_backward(attention_shape(c, c.t_in(1), c.t_in(0)), f32(c.in[0]), f32(c.in[1]),
                            f32(c.out[0]));
}

void attention_context(const HostCall& c) {
  // [dy, probs, qkv] -> [dprobs, dqkv]
  if (c.in.size() != 3 || c.out.size() != 2) {
    c.fail("attention_context backward reads dy, probs, qkv, writes dprobs, dqkv");
  }
  attention_context_backward(attention_shape(c, c.t_in(2), c.t_in(1)), f32(c.in[0]), f32(c.in[1]),
                             f32(c.in[2]), f32(c.out[0]), f32(c.out[1]));
}

void conv(const HostCall& c) {
  // [dy, x, w] -> [dx,] dw [, db]
  const Grads g = grads(c);
  const ConvShape s = conv_shape(c, c.t_in(1), c.t_in(2));
  float* ws = c.scratch(s.workspace_elements());
  if (g.dx != nullptr) conv_backward_data(s, f32(c.in[0]), f32(c.in[2]), g.dx, ws);
  conv_backward_filter(s, f32(c.in[1]), f32(c.in[0]), g.dw, g.db, ws);
}

void max_pool(const HostCall& c) {
  // [dy, y, indices] -> [dx]
  if (c.in.size() != 3 || c.out.size() != 1)
    c.fail(c.op.layer.str() + " backward reads dy, x, indices");
  max_pool_backward(pool_shape(c, c.t_out(0), c.t_in(0)), f32(c.in[0]), i64(c.in[2]),
                    f32(c.out[0]));
}

void add(const HostCall& c) {
  // Gradient accumulation: the sum of the incoming gradients.
  if (c.in.empty() || c.out.size() != 1) c.fail("add backward sums its inputs into one output");
  sum_into(elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax_cross_entropy(const HostCall& c) {
  // [probs, labels] -> [dlogits]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("reads probs and labels, writes dlogits");
  const auto [n, classes] = c.rows_of(c.t_in(0));
  softmax_cross_entropy_backward(n, classes, f32(c.in[0]), i64(c.in[1]), f32(c.out[0]));
}

}  // namespace bwd

namespace update {

void sgd(const HostCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  const SgdDefaults d;
  const float lr = c.attr_f("lr", d.lr);
  const float momentum = c.attr_f("momentum", d.momentum);
  const float weight_decay = c.attr_f("weight_decay", d.weight_decay);
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    sgd_momentum_update(n, lr, momentum, weight_decay, f32(c.in[i]), f32(c.in[k + i]),
                        f32(c.in[2 * k + i]));
  }
}

void adam(const HostCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  const AdamStep s = adam_step(c.op);
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    adam_update(n, s, f32(c.in[i]), f32(c.in[k + i]), f32(c.in[2 * k + i]), f32(c.in[3 * k + i]));
  }
}

}  // namespace update

/// The host kernels of each layer, per phase (Note [Adding a layer] in core/layer.hpp).
using Kernel = void (*)(const HostCall&);
struct KernelRow {
  sim::Layer layer = sim::Layer::kGeneric;
  Kernel forward = nullptr;
  Kernel backward = nullptr;
  Kernel update = nullptr;
};

constexpr std::array<KernelRow, sim::kLayerCount> by_layer(std::initializer_list<KernelRow> rows) {
  std::array<KernelRow, sim::kLayerCount> table{};
  for (const KernelRow& r : rows) table[static_cast<std::size_t>(r.layer)] = r;
  return table;
}

using enum sim::Layer;
// clang-format off
constexpr std::array<KernelRow, sim::kLayerCount> kKernels = by_layer({
    {kConv2d, fwd::conv, bwd::conv, nullptr},
    {kConv3d, fwd::conv, bwd::conv, nullptr},
    {kLinear, fwd::linear, bwd::linear, nullptr},
    {kBatchNorm, fwd::batch_norm, bwd::batch_norm, nullptr},
    {kLayerNorm, fwd::layer_norm, bwd::layer_norm, nullptr},
    {kRelu, fwd::relu, bwd::relu, nullptr},
    {kRelu6, fwd::relu6, bwd::relu6, nullptr},
    {kGelu, fwd::gelu, bwd::gelu, nullptr},
    {kMaxPool2d, fwd::max_pool, bwd::max_pool, nullptr},
    {kMaxPool3d, fwd::max_pool, bwd::max_pool, nullptr},
    {kAvgPool2d, fwd::avg_pool, bwd::avg_pool, nullptr},
    {kAvgPool3d, fwd::avg_pool, bwd::avg_pool, nullptr},
    {kAdaptiveAvgPool, fwd::adaptive_avg_pool, bwd::adaptive_avg_pool, nullptr},
    {kDropout, fwd::dropout, bwd::dropout, nullptr},
    {kConcat, fwd::concat, bwd::concat, nullptr},
    {kAdd, fwd::add, bwd::add, nullptr},
    {kGradAccumulate, nullptr, bwd::add, nullptr},
    {kSoftmax, fwd::softmax, bwd::softmax, nullptr},
    {kSoftmaxCrossEntropy, fwd::softmax_cross_entropy, bwd::softmax_cross_entropy, nullptr},
    {kEmbedding, fwd::embedding, bwd::embedding, nullptr},
    {kAttentionScores, fwd::attention_scores, bwd::attention_scores, nullptr},
    {kAttentionContext, fwd::attention_context, bwd::attention_context, nullptr},
    {kSgd, nullptr, nullptr, update::sgd},
    {kAdam, nullptr, nullptr, update::adam},
});
// clang-format on

}  // namespace

void OpExecutor::run(const sim::Op& op, std::span<void* const> operands) {
  const KernelRow& row = kKernels[static_cast<std::size_t>(op.layer.kind())];
  const Kernel kernel = op.phase == sim::Phase::kForward    ? row.forward
                        : op.phase == sim::Phase::kBackward ? row.backward
                                                            : row.update;
  if (kernel == nullptr) runtime::no_kernel(op, "host");
  runtime::refuse_unsupported(op, "host");
  const std::size_t n_in = op.inputs.size();
  const std::size_t n_out = op.outputs.size();
  if (operands.size() < n_in + n_out) {
    throw runtime::BackendError(runtime::op_place(op) + ": fewer operands than inputs and outputs");
  }
  const HostCall call{{w_, op, operands.subspan(0, n_in), operands.subspan(n_in, n_out)},
                      &scratch_};
  try {
    kernel(call);
  } catch (const runtime::BackendError&) {
    throw;
  } catch (const std::exception& e) {  // a kernel's own check (std::invalid_argument, ...)
    call.fail(e.what());
  }
}

}  // namespace memplan::host_backend
