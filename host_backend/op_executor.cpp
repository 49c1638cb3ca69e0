#include "host_backend/op_executor.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "host_backend/conv_kernels.hpp"
#include "host_backend/layer_kernels.hpp"

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
  if (x.shape.size() != 4 || w.shape.size() != 4) fail(op, "conv2d needs 4-d input and filter");
  ConvShape s;
  s.batch = x.shape[0];
  s.in_channels = x.shape[1];
  s.in_h = x.shape[2];
  s.in_w = x.shape[3];
  s.out_channels = w.shape[0];
  s.groups = attr(op, "groups", 0, 1);
  s.kernel_h = attr(op, "kernel", 0, w.shape[2]);
  s.kernel_w = attr(op, "kernel", 1, w.shape[3]);
  s.stride_h = attr(op, "stride", 0, 1);
  s.stride_w = attr(op, "stride", 1, 1);
  s.pad_h = attr(op, "padding", 0, 0);
  s.pad_w = attr(op, "padding", 1, 0);
  try {
    s.check();
  } catch (const std::exception& e) {
    fail(op, e.what());
  }
  return s;
}

PoolShape pool_shape(const sim::Op& op, const sim::Tensor& x) {
  if (x.shape.size() != 4) fail(op, "max_pool2d needs a 4-d input");
  PoolShape s;
  s.batch = x.shape[0];
  s.channels = x.shape[1];
  s.in_h = x.shape[2];
  s.in_w = x.shape[3];
  s.kernel_h = attr(op, "kernel", 0, 2);
  s.kernel_w = attr(op, "kernel", 1, 2);
  s.stride_h = attr(op, "stride", 0, s.kernel_h);
  s.stride_w = attr(op, "stride", 1, s.kernel_w);
  s.pad_h = attr(op, "padding", 0, 0);
  s.pad_w = attr(op, "padding", 1, 0);
  return s;
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
  } else if (op.layer == "linear") {
    const sim::Tensor& w = t_in(1);
    if (w.shape.size() != 2) fail(op, "linear needs a 2-d weight [in, out]");
    const std::int64_t n = elements(t_in(0)) / w.shape[0];
    const float* bias = in.size() > 2 ? f32(in[2]) : nullptr;
    linear_forward(n, w.shape[0], w.shape[1], f32(in[0]), f32(in[1]), bias, f32(out[0]));
  } else if (op.layer == "conv2d") {
    const ConvShape s = conv_shape(op, t_in(0), t_in(1));
    const float* bias = in.size() > 2 ? f32(in[2]) : nullptr;
    conv_forward(s, f32(in[0]), f32(in[1]), bias, f32(out[0]), scratch(s.workspace_elements()));
  } else if (op.layer == "max_pool2d") {
    if (out.size() != 2) fail(op, "max_pool2d writes its output and its indices");
    max_pool_forward(pool_shape(op, t_in(0)), f32(in[0]), f32(out[0]), i64(out[1]));
  } else if (op.layer == "add") {
    if (in.empty()) fail(op, "add needs inputs");
    sum_into(elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax_cross_entropy") {
    if (out.size() != 2) fail(op, "softmax_cross_entropy writes the loss and the probabilities");
    const sim::Tensor& logits = t_in(0);
    if (logits.shape.size() != 2) fail(op, "softmax_cross_entropy needs 2-d logits");
    *f32(out[0]) = softmax_cross_entropy_forward(logits.shape[0], logits.shape[1], f32(in[0]),
                                                 i64(in[1]), f32(out[1]));
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
  } else if (op.layer == "linear") {
    // [dy, x, w] -> [dx,] dw [, db] (no dx when x needs no gradient)
    const Grads g = split_grads(op, out, "linear");
    const sim::Tensor& w = t_in(2);
    const std::int64_t n = elements(t_in(1)) / w.shape[0];
    linear_backward(n, w.shape[0], w.shape[1], f32(in[1]), f32(in[2]), f32(in[0]), g.dx, g.dw,
                    g.db);
  } else if (op.layer == "conv2d") {
    // [dy, x, w] -> [dx,] dw [, db]
    const Grads g = split_grads(op, out, "conv2d");
    const ConvShape s = conv_shape(op, t_in(1), t_in(2));
    float* ws = scratch(s.workspace_elements());
    if (g.dx != nullptr) conv_backward_data(s, f32(in[0]), f32(in[2]), g.dx, ws);
    conv_backward_filter(s, f32(in[1]), f32(in[0]), g.dw, g.db, ws);
  } else if (op.layer == "max_pool2d") {
    // [dy, y, indices] -> [dx]
    if (in.size() != 3 || out.size() != 1) fail(op, "max_pool2d backward reads dy, y, indices");
    max_pool_backward(pool_shape(op, t_out(0)), f32(in[0]), i64(in[2]), f32(out[0]));
  } else if (op.layer == "add") {
    // Gradient accumulation: the sum of the incoming gradients.
    if (in.empty() || out.size() != 1) fail(op, "add backward sums its inputs into one output");
    sum_into(elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax_cross_entropy") {
    // [probs, labels] -> [dlogits]
    if (in.size() != 2 || out.size() != 1) fail(op, "reads probs and labels, writes dlogits");
    const sim::Tensor& probs = t_in(0);
    softmax_cross_entropy_backward(probs.shape[0], probs.shape[1], f32(in[0]), i64(in[1]),
                                   f32(out[0]));
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
