#include "host_backend/op_executor.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "host_backend/conv_kernels.hpp"
#include "host_backend/layer_kernels.hpp"
#include "host_backend/transformer_kernels.hpp"

namespace memplan::host_backend {

namespace {

[[noreturn]] void fail(const sim::Op& op, const std::string& what) {
  throw std::runtime_error("op '" + op.name + "' (" + op.layer + ", " +
                           std::string(sim::to_string(op.phase)) + "): " + what);
}

std::int64_t elements(const sim::Tensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  return n;
}

float* f32(void* p) {
  return static_cast<float*>(p);
}
std::int64_t* i64(void* p) {
  return static_cast<std::int64_t*>(p);
}

std::int64_t attr(const sim::Op& op, const char* name, std::size_t i, std::int64_t fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  const auto& v = it->second;
  return static_cast<std::int64_t>(v[std::min(i, v.size() - 1)]);
}

float attr_f(const sim::Op& op, const char* name, float fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  return static_cast<float>(it->second.front());
}

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

ConvShape conv_shape(const sim::Op& op, const sim::Tensor& x, const sim::Tensor& w) {
  const std::size_t rank = op.layer == "conv3d" ? 5 : 4;
  if (x.shape.size() != rank || w.shape.size() != rank) {
    fail(op, op.layer + " needs " + std::to_string(rank) + "-d input and filter");
  }
  // Spatial attributes list D, H, W for conv3d and H, W for conv2d.
  const std::size_t d0 = rank == 5 ? 1 : 0;  // attribute index of H
  ConvShape s;
  s.batch = x.shape[0];
  s.in_channels = x.shape[1];
  s.out_channels = w.shape[0];
  s.groups = attr(op, "groups", 0, 1);
  if (rank == 5) {
    s.in_d = x.shape[2];
    s.kernel_d = attr(op, "kernel", 0, w.shape[2]);
    s.stride_d = attr(op, "stride", 0, 1);
    s.pad_d = attr(op, "padding", 0, 0);
  }
  s.in_h = x.shape[rank - 2];
  s.in_w = x.shape[rank - 1];
  s.kernel_h = attr(op, "kernel", d0, w.shape[rank - 2]);
  s.kernel_w = attr(op, "kernel", d0 + 1, w.shape[rank - 1]);
  s.stride_h = attr(op, "stride", d0, 1);
  s.stride_w = attr(op, "stride", d0 + 1, 1);
  s.pad_h = attr(op, "padding", d0, 0);
  s.pad_w = attr(op, "padding", d0 + 1, 0);
  try {
    s.check();
  } catch (const std::exception& e) {
    fail(op, e.what());
  }
  return s;
}

/// The window of a pooling op (2D, or 3D for the *_pool3d layers) over input `x`, with PyTorch's
/// ceil_mode, checked against its output `y`.
PoolShape pool_shape(const sim::Op& op, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = op.layer.ends_with("3d") ? 5 : 4;
  if (x.shape.size() != rank || y.shape.size() != rank) {
    fail(op, op.layer + " needs " + std::to_string(rank) + "-d tensors");
  }
  const std::size_t h = rank == 5 ? 1 : 0;  // attribute index of H
  PoolShape s;
  s.batch = x.shape[0];
  s.channels = x.shape[1];
  if (rank == 5) {
    s.in_d = x.shape[2];
    s.kernel_d = attr(op, "kernel", 0, 2);
    s.stride_d = attr(op, "stride", 0, s.kernel_d);
    s.pad_d = attr(op, "padding", 0, 0);
  }
  s.in_h = x.shape[rank - 2];
  s.in_w = x.shape[rank - 1];
  s.kernel_h = attr(op, "kernel", h, 2);
  s.kernel_w = attr(op, "kernel", h + 1, 2);
  s.stride_h = attr(op, "stride", h, s.kernel_h);
  s.stride_w = attr(op, "stride", h + 1, s.kernel_w);
  s.pad_h = attr(op, "padding", h, 0);
  s.pad_w = attr(op, "padding", h + 1, 0);
  s.ceil_mode = attr(op, "ceil_mode", 0, 0) != 0;
  try {
    s.check();
  } catch (const std::exception& e) {
    fail(op, e.what());
  }
  if ((rank == 5 && s.out_d() != y.shape[2]) || s.out_h() != y.shape[rank - 2] ||
      s.out_w() != y.shape[rank - 1]) {
    fail(op, "output extents differ from the window's");
  }
  return s;
}

/// Adaptive average pooling from input `x` [N, C, (D,) H, W] to output `y` of the same rank.
AdaptivePoolShape adaptive_shape(const sim::Op& op, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = x.shape.size();
  if ((rank != 4 && rank != 5) || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, "adaptive_avg_pool maps [N, C, spatial...] to [N, C, spatial...] of rank 4 or 5");
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

BatchNormShape batch_norm_shape(const sim::Op& op, const sim::Tensor& x) {
  if (x.shape.size() < 2) fail(op, "batch_norm needs [N, C, ...] input");
  BatchNormShape s;
  s.batch = x.shape[0];
  s.channels = x.shape[1];
  s.spatial = elements(x) / (s.batch * s.channels);
  s.epsilon = attr_f(op, "epsilon", 1e-5f);
  return s;
}

/// Dropout probability (attribute `p`, PyTorch's default 0.5) and the mask's seed: a function of
/// the forward op alone, so a recompute draws the same mask as the first run.
float dropout_p(const sim::Op& op) {
  return attr_f(op, "p", 0.5f);
}
std::uint64_t dropout_seed(sim::OpId forward) {
  return 0x6d656d706c616eULL ^ (static_cast<std::uint64_t>(forward) * 0x9e3779b97f4a7c15ULL);
}

/// Channels of each part of a concat along dim 1, and the spatial extent they share.
void concat_extents(const sim::Op& op, const std::vector<const sim::Tensor*>& parts,
                    std::vector<std::int64_t>& channels, std::int64_t& spatial) {
  channels.clear();
  spatial = -1;
  for (const sim::Tensor* t : parts) {
    if (t->shape.size() < 2) fail(op, "concat parts are [N, C, ...]");
    const std::int64_t sp = elements(*t) / (t->shape[0] * t->shape[1]);
    if (spatial >= 0 && sp != spatial) fail(op, "concat parts differ in spatial extents");
    spatial = sp;
    channels.push_back(t->shape[1]);
  }
}

/// Attention extents from the fused QKV tensor [B, S, 3H] and the heads of the scores tensor.
AttentionShape attention_shape(const sim::Op& op, const sim::Tensor& qkv,
                               const sim::Tensor& scores) {
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0 || scores.shape.size() != 4) {
    fail(op, "attention reads qkv [B, S, 3H] and scores [B, heads, S, S]");
  }
  AttentionShape s;
  s.batch = qkv.shape[0];
  s.sequence = qkv.shape[1];
  s.hidden = qkv.shape[2] / 3;
  s.heads = scores.shape[1];
  try {
    s.check();
  } catch (const std::exception& e) {
    fail(op, e.what());
  }
  return s;
}

/// Rows of the last axis of `t` and that axis' extent.
std::pair<std::int64_t, std::int64_t> rows_of(const sim::Op& op, const sim::Tensor& t) {
  if (t.shape.empty() || t.shape.back() <= 0) fail(op, "needs a non-empty last axis");
  return {elements(t) / t.shape.back(), t.shape.back()};
}

}  // namespace

// Outputs of a linear or conv backward: [dx,] dw [, db]. Whether there is a bias gradient comes
// from the forward op (a third input) when the trace names it, else from a last output of rank 1.
OpExecutor::Grads OpExecutor::split_grads(const sim::Op& op, std::span<void* const> out,
                                          const char* layer) const {
  if (op.inputs.size() != 3 || out.empty() || out.size() > 3) {
    fail(op, std::string(layer) + " backward reads dy, x and w, writes [dx,] dw [, db]");
  }
  bool bias = false;
  if (op.differentiates != sim::kNoId) {
    bias = w_.op(op.differentiates).inputs.size() == 3;
  } else {
    bias = out.size() >= 2 && w_.tensor(op.outputs.back()).shape.size() == 1;
  }
  const std::size_t without_dx = bias ? 2 : 1;
  if (out.size() != without_dx && out.size() != without_dx + 1) {
    fail(op, "output count does not match [dx,] dw [, db]");
  }
  Grads g;
  std::size_t i = 0;
  if (out.size() == without_dx + 1) g.dx = f32(out[i++]);
  g.dw = f32(out[i++]);
  if (bias) g.db = f32(out[i]);
  return g;
}

float* OpExecutor::scratch(std::int64_t floats) {
  if (scratch_.size() < static_cast<std::size_t>(floats)) {
    scratch_.resize(static_cast<std::size_t>(floats));
  }
  return scratch_.data();
}

void OpExecutor::run(const sim::Op& op, std::span<void* const> operands) {
  const std::size_t n_in = op.inputs.size();
  const std::size_t n_out = op.outputs.size();
  if (operands.size() < n_in + n_out) fail(op, "fewer operands than inputs and outputs");
  const auto in = operands.subspan(0, n_in);
  const auto out = operands.subspan(n_in, n_out);
  switch (op.phase) {
    case sim::Phase::kForward:
      forward(op, in, out);
      break;
    case sim::Phase::kBackward:
      backward(op, in, out);
      break;
    case sim::Phase::kUpdate:
      update(op, in);
      break;
  }
}

void OpExecutor::forward(const sim::Op& op, std::span<void* const> in, std::span<void* const> out) {
  const auto& t_in = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.inputs[i]); };
  const auto& t_out = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.outputs[i]); };
  if (op.layer == "relu") {
    relu_forward(elements(t_in(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "relu6") {
    relu6_forward(elements(t_in(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "linear") {
    const sim::Tensor& w = t_in(1);
    if (w.shape.size() != 2) fail(op, "linear needs a 2-d weight [out, in]");
    const std::int64_t n = elements(t_in(0)) / w.shape[1];
    const float* bias = in.size() > 2 ? f32(in[2]) : nullptr;
    linear_forward(n, w.shape[1], w.shape[0], f32(in[0]), f32(in[1]), bias, f32(out[0]));
  } else if (op.layer == "batch_norm") {
    // [x, gamma, beta (, running stats)] -> [y, save_mean, save_invstd]
    if (in.size() < 3 || out.size() != 3) {
      fail(op, "batch_norm reads x, weight, bias [, running stats], writes y, mean, invstd");
    }
    batch_norm_forward(batch_norm_shape(op, t_in(0)), f32(in[0]), f32(in[1]), f32(in[2]),
                       f32(out[0]), f32(out[1]), f32(out[2]));
  } else if (op.layer == "avg_pool2d" || op.layer == "avg_pool3d") {
    avg_pool_forward(pool_shape(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "adaptive_avg_pool") {
    adaptive_avg_pool_forward(adaptive_shape(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "dropout") {
    if (out.size() != 2) fail(op, "dropout writes its output and its mask");
    try {
      dropout_forward(elements(t_in(0)), dropout_p(op), dropout_seed(op.id), f32(in[0]),
                      f32(out[0]), static_cast<std::uint8_t*>(out[1]));
    } catch (const std::invalid_argument& e) {
      fail(op, e.what());
    }
  } else if (op.layer == "concat") {
    std::vector<const sim::Tensor*> parts;
    std::vector<const float*> data;
    for (std::size_t i = 0; i < in.size(); ++i) {
      parts.push_back(&t_in(i));
      data.push_back(f32(in[i]));
    }
    std::vector<std::int64_t> channels;
    std::int64_t spatial = 0;
    concat_extents(op, parts, channels, spatial);
    concat_forward(t_in(0).shape[0], spatial, static_cast<int>(parts.size()), channels.data(),
                   data.data(), f32(out[0]));
  } else if (op.layer == "layer_norm") {
    // [x, w, b] -> [y, mean, rstd]
    if (in.size() != 3 || out.size() != 3)
      fail(op, "layer_norm reads x, w, b, writes y, mean, rstd");
    const auto [rows, h] = rows_of(op, t_in(0));
    layer_norm_forward(rows, h, attr_f(op, "epsilon", 1e-5f), f32(in[0]), f32(in[1]), f32(in[2]),
                       f32(out[0]), f32(out[1]), f32(out[2]));
  } else if (op.layer == "gelu") {
    gelu_forward(elements(t_in(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "softmax") {
    const auto [rows, cols] = rows_of(op, t_in(0));
    softmax_forward(rows, cols, f32(in[0]), f32(out[0]));
  } else if (op.layer == "embedding") {
    // [indices, table] -> [y]
    const sim::Tensor& table = t_in(1);
    if (in.size() != 2 || table.shape.size() != 2)
      fail(op, "embedding reads indices and a 2-d table");
    try {
      embedding_forward(elements(t_in(0)), table.shape[1], table.shape[0], i64(in[0]), f32(in[1]),
                        f32(out[0]));
    } catch (const std::out_of_range& e) {
      fail(op, e.what());
    }
  } else if (op.layer == "attention_scores") {
    attention_scores_forward(attention_shape(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "attention_context") {
    // [probs, qkv] -> [y]
    if (in.size() != 2) fail(op, "attention_context reads probs and qkv");
    attention_context_forward(attention_shape(op, t_in(1), t_in(0)), f32(in[0]), f32(in[1]),
                              f32(out[0]));
  } else if (op.layer == "conv2d" || op.layer == "conv3d") {
    const ConvShape s = conv_shape(op, t_in(0), t_in(1));
    const float* bias = in.size() > 2 ? f32(in[2]) : nullptr;
    conv_forward(s, f32(in[0]), f32(in[1]), bias, f32(out[0]), scratch(s.workspace_elements()));
  } else if (op.layer == "max_pool2d" || op.layer == "max_pool3d") {
    if (out.size() != 2) fail(op, op.layer + " writes its output and its indices");
    max_pool_forward(pool_shape(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0]), i64(out[1]));
  } else if (op.layer == "add") {
    if (in.empty()) fail(op, "add needs inputs");
    sum_into(elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax_cross_entropy") {
    if (out.size() != 2) fail(op, "softmax_cross_entropy writes the loss and the probabilities");
    // Classes on the last axis; every other position is one sample (a sequence's tokens too).
    const auto [n, classes] = rows_of(op, t_in(0));
    *f32(out[0]) = softmax_cross_entropy_forward(n, classes, f32(in[0]), i64(in[1]), f32(out[1]));
  } else {
    fail(op, "no host kernel for this layer type");
  }
}

void OpExecutor::backward(const sim::Op& op, std::span<void* const> in,
                          std::span<void* const> out) {
  const auto& t_in = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.inputs[i]); };
  const auto& t_out = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.outputs[i]); };
  if (op.layer == "relu") {
    // [dy, y] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "relu backward reads dy and y, writes dx");
    relu_backward(elements(t_in(0)), f32(in[0]), f32(in[1]), f32(out[0]));
  } else if (op.layer == "relu6") {
    // [dy, y] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "relu6 backward reads dy and y, writes dx");
    relu6_backward(elements(t_in(0)), f32(in[0]), f32(in[1]), f32(out[0]));
  } else if (op.layer == "linear") {
    // [dy, x, w] -> [dx,] dw [, db] (no dx when x needs no gradient)
    const Grads g = split_grads(op, out, "linear");
    const sim::Tensor& w = t_in(2);
    if (w.shape.size() != 2) fail(op, "linear needs a 2-d weight [out, in]");
    const std::int64_t n = elements(t_in(1)) / w.shape[1];
    linear_backward(n, w.shape[1], w.shape[0], f32(in[1]), f32(in[2]), f32(in[0]), g.dx, g.dw,
                    g.db);
  } else if (op.layer == "batch_norm") {
    // [dy, x, gamma, save_mean, save_invstd] -> [dx,] dgamma, dbeta [, d running stats]. The zoo
    // marks the running statistics trainable and gives them a gradient tensor: the loss of a
    // training step does not depend on them (they are only written), so that gradient is zero.
    if (in.size() != 5 || out.size() < 2 || out.size() > 4) {
      fail(op, "batch_norm backward reads dy, x, weight, mean, invstd, writes [dx,] dw, db");
    }
    const bool has_dx = t_out(0).shape == t_in(1).shape;
    const std::size_t k = has_dx ? 1 : 0;
    if (out.size() < k + 2) fail(op, "batch_norm backward writes [dx,] dw, db");
    batch_norm_backward(batch_norm_shape(op, t_in(1)), f32(in[1]), f32(in[2]), f32(in[3]),
                        f32(in[4]), f32(in[0]), has_dx ? f32(out[0]) : nullptr, f32(out[k]),
                        f32(out[k + 1]));
    if (out.size() == k + 3) std::fill_n(f32(out[k + 2]), elements(t_out(k + 2)), 0.0f);
    if (out.size() > k + 3) fail(op, "batch_norm backward writes [dx,] dw, db [, d running]");
  } else if (op.layer == "avg_pool2d" || op.layer == "avg_pool3d") {
    // [dy, x] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, op.layer + " backward reads dy and x");
    avg_pool_backward(pool_shape(op, t_out(0), t_in(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "adaptive_avg_pool") {
    // [dy, x] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "adaptive_avg_pool backward reads dy and x");
    adaptive_avg_pool_backward(adaptive_shape(op, t_out(0), t_in(0)), f32(in[0]), f32(out[0]));
  } else if (op.layer == "dropout") {
    // [dy, mask] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "dropout backward reads dy and the mask");
    dropout_backward(elements(t_in(0)), dropout_p(op), f32(in[0]),
                     static_cast<const std::uint8_t*>(in[1]), f32(out[0]));
  } else if (op.layer == "concat") {
    // [dy] -> the gradient of every part (all parts must need one: the split is by position)
    if (in.size() != 1) fail(op, "concat backward reads dy");
    if (op.differentiates == sim::kNoId || w_.op(op.differentiates).inputs.size() != out.size()) {
      fail(op, "concat backward must write the gradient of every part of its forward op");
    }
    std::vector<const sim::Tensor*> parts;
    std::vector<float*> data;
    for (std::size_t i = 0; i < out.size(); ++i) {
      parts.push_back(&t_out(i));
      data.push_back(f32(out[i]));
    }
    std::vector<std::int64_t> channels;
    std::int64_t spatial = 0;
    concat_extents(op, parts, channels, spatial);
    concat_backward(t_in(0).shape[0], spatial, static_cast<int>(parts.size()), channels.data(),
                    f32(in[0]), data.data());
  } else if (op.layer == "layer_norm") {
    // [dy, x, w, mean, rstd] -> [dx,] dw, db
    if (in.size() != 5 || out.size() < 2 || out.size() > 3) {
      fail(op, "layer_norm backward reads dy, x, w, mean, rstd, writes [dx,] dw, db");
    }
    const bool has_dx = out.size() == 3;
    const std::size_t k = has_dx ? 1 : 0;
    const auto [rows, h] = rows_of(op, t_in(1));
    layer_norm_backward(rows, h, f32(in[1]), f32(in[2]), f32(in[3]), f32(in[4]), f32(in[0]),
                        has_dx ? f32(out[0]) : nullptr, f32(out[k]), f32(out[k + 1]));
  } else if (op.layer == "gelu") {
    // [dy, x] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "gelu backward reads dy and x, writes dx");
    gelu_backward(elements(t_in(0)), f32(in[0]), f32(in[1]), f32(out[0]));
  } else if (op.layer == "softmax") {
    // [dy, y] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "softmax backward reads dy and y, writes dx");
    const auto [rows, cols] = rows_of(op, t_in(1));
    softmax_backward(rows, cols, f32(in[0]), f32(in[1]), f32(out[0]));
  } else if (op.layer == "embedding") {
    // [dy, indices] -> [dtable]
    const sim::Tensor& table = t_out(0);
    if (in.size() != 2 || out.size() != 1 || table.shape.size() != 2) {
      fail(op, "embedding backward reads dy and indices, writes the table's gradient");
    }
    try {
      embedding_backward(elements(t_in(1)), table.shape[1], table.shape[0], i64(in[1]), f32(in[0]),
                         f32(out[0]));
    } catch (const std::out_of_range& e) {
      fail(op, e.what());
    }
  } else if (op.layer == "attention_scores") {
    // [dscores, qkv] -> [dqkv]
    if (in.size() != 2 || out.size() != 1) fail(op, "attention_scores backward reads dy and qkv");
    attention_scores_backward(attention_shape(op, t_in(1), t_in(0)), f32(in[0]), f32(in[1]),
                              f32(out[0]));
  } else if (op.layer == "attention_context") {
    // [dy, probs, qkv] -> [dprobs, dqkv]
    if (in.size() != 3 || out.size() != 2) {
      fail(op, "attention_context backward reads dy, probs, qkv, writes dprobs, dqkv");
    }
    attention_context_backward(attention_shape(op, t_in(2), t_in(1)), f32(in[0]), f32(in[1]),
                               f32(in[2]), f32(out[0]), f32(out[1]));
  } else if (op.layer == "conv2d" || op.layer == "conv3d") {
    // [dy, x, w] -> [dx,] dw [, db]
    const Grads g = split_grads(op, out, op.layer.c_str());
    const ConvShape s = conv_shape(op, t_in(1), t_in(2));
    float* ws = scratch(s.workspace_elements());
    if (g.dx != nullptr) conv_backward_data(s, f32(in[0]), f32(in[2]), g.dx, ws);
    conv_backward_filter(s, f32(in[1]), f32(in[0]), g.dw, g.db, ws);
  } else if (op.layer == "max_pool2d" || op.layer == "max_pool3d") {
    // [dy, y, indices] -> [dx]
    if (in.size() != 3 || out.size() != 1) fail(op, op.layer + " backward reads dy, x, indices");
    max_pool_backward(pool_shape(op, t_out(0), t_in(0)), f32(in[0]), i64(in[2]), f32(out[0]));
  } else if (op.layer == "add" || op.layer == "grad_accumulate") {
    // Gradient accumulation: the sum of the incoming gradients.
    if (in.empty() || out.size() != 1) fail(op, "add backward sums its inputs into one output");
    sum_into(elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax_cross_entropy") {
    // [probs, labels] -> [dlogits]
    if (in.size() != 2 || out.size() != 1) fail(op, "reads probs and labels, writes dlogits");
    const auto [n, classes] = rows_of(op, t_in(0));
    softmax_cross_entropy_backward(n, classes, f32(in[0]), i64(in[1]), f32(out[0]));
  } else {
    fail(op, "no host kernel for this layer type");
  }
}

void OpExecutor::update(const sim::Op& op, std::span<void* const> in) {
  if (op.layer != "sgd") fail(op, "no host kernel for this update");
  if (in.size() % 3 != 0) fail(op, "sgd reads params, grads and momentum buffers (3 groups)");
  const SgdDefaults d;
  const float lr = attr_f(op, "lr", d.lr);
  const float momentum = attr_f(op, "momentum", d.momentum);
  const float weight_decay = attr_f(op, "weight_decay", d.weight_decay);
  const std::size_t k = in.size() / 3;
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(w_.tensor(op.inputs[i]));
    if (elements(w_.tensor(op.inputs[k + i])) != n ||
        elements(w_.tensor(op.inputs[2 * k + i])) != n) {
      fail(op, "param, grad and momentum " + std::to_string(i) + " differ in size");
    }
    sgd_momentum_update(n, lr, momentum, weight_decay, f32(in[i]), f32(in[k + i]),
                        f32(in[2 * k + i]));
  }
}

}  // namespace memplan::host_backend
