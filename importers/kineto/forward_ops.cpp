// The forward ops of a step: one rule per layer for what the op reads (its data inputs resolved
// by Note [Kineto dataflow], its parameters from the recorded arguments), what it writes and what
// its backward op will read (PyTorch's autograd formulas), and a generic rule for any other op.
#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

using sim::Layer;
using sim::OpId;
using sim::TensorId;
using sim::TensorKind;

// One forward op being built: its event, its op and what backward will need of it; reading,
// writing and parameter tensors go through here.
struct StepBuilder::ForwardOp {
  StepBuilder& im;
  const CpuEvent& e;
  std::size_t position;  // in units_
  std::string name;
  OpId op;
  const Shape& x_shape;  // the first argument's shape and dtype
  std::string dtype;
  ForwardInfo info;

  TensorId read(std::size_t v) {
    im.values_[v].read = true;
    const TensorId t = im.values_[v].tensor;
    im.add_input(op, t);
    // An op that reads one tensor twice (x * x) has one gradient for it, summed inside its
    // backward kernel: listing it twice would make the backward op read its own output.
    const auto& in = info.data_inputs;
    if (im.tensor(t).kind == TensorKind::kActivation &&
        std::find(in.begin(), in.end(), t) == in.end())
      info.data_inputs.push_back(t);
    return t;
  }
  TensorId produce(const std::string& suffix, const Shape& shape, const std::string& dt,
                   TensorId in_place = sim::kNoTensor) {
    return im.add_tensor(name + suffix, TensorKind::kActivation, shape, dt, op, in_place);
  }
  TensorId weight(const std::string& suffix, std::size_t k, bool trainable) {
    const TensorId p = im.param(name + suffix, dims(e, k), dtype_of(e, k), trainable);
    im.add_input(op, p);
    if (trainable) info.params.push_back(p);
    return p;
  }
  // Written in place over `base` when the op is an in-place one and nothing else needs `base`.
  [[nodiscard]] bool in_place_ok(std::size_t base) const {
    return ends_with(e.name, "_") && im.values_[base].activation &&
           im.saved_.count(im.values_[base].tensor) == 0;
  }
  // The output value, shaped `shape`.
  std::size_t output(const Shape& shape, const std::string& dt) {
    return im.new_value(info.output, shape, dt, true);
  }
};

namespace {

// An elementwise activation, or a copy (a contiguous() or reshape that cloned): like ReLU, its
// output carries on and its input is superseded.
bool supersedes_input(const sim::LayerType& layer) {
  if (layer.kind() == Layer::kGelu || layer.kind() == Layer::kRelu6) return true;
  const std::string name = layer.str();
  for (std::string_view a :
       {"silu", "sigmoid", "hardswish", "hardsigmoid", "tanh", "hardtanh", "mish", "elu",
        "leaky_relu", "softplus", "contiguous", "clone", "reshape"}) {
    if (name == a || name == std::string(a) + "_") return true;
  }
  return false;
}

}  // namespace

void StepBuilder::build_forward(Unit& unit, std::size_t position) {
  const CpuEvent& e = event(unit);
  if (time_only_) {
    build_timed_forward(unit);
    return;
  }
  if (unit.alias != Unit::Alias::kNone) {
    build_alias(unit, position);
    return;
  }
  const std::string layer = unit.layer.str();
  const std::string name = fmt::format("{}_{}", layer, ++layer_counts_[layer]);
  const OpId o = add_op(name, unit.layer, sim::Phase::kForward, unit);
  ForwardOp f{*this, e, position, name, o, dims(e, 0), dtype_of(e, 0), {}};
  f.info.layer = unit.layer.kind();
  f.info.name = name;
  const std::size_t out_value = forward_layer(f, unit);
  ForwardInfo& info = f.info;
  saved_.insert(info.saved.begin(), info.saved.end());
  const Layer kind = unit.layer.kind();
  if (!info.data_inputs.empty() && (kind == Layer::kBatchNorm || kind == Layer::kLayerNorm ||
                                    kind == Layer::kRelu || supersedes_input(unit.layer))) {
    for (Value& value : values_) {
      if (value.tensor == info.data_inputs.front()) value.superseded = true;
    }
  }
  last_output_ = out_value;
  for (std::int64_t s : unit.sequences) op_of_sequence_[s] = o;
  unit.op = o;
  forward_[o] = std::move(info);
  ++report_.forward_ops;
}

// A view or a device copy: the same tensor under another shape, no op.
void StepBuilder::build_alias(const Unit& unit, std::size_t position) {
  const CpuEvent& e = event(unit);
  const Shape& x_shape = dims(e, 0);
  const std::string dtype = dtype_of(e, 0);
  const std::size_t x = resolve(x_shape, dtype, true);
  // A view's shape from its recorded arguments, else from the next op that reads as many values.
  const Shape to = unit.alias == Unit::Alias::kView
                       ? view_shape(e).value_or(lookahead_view(position, x_shape))
                       : x_shape;
  last_output_ = new_value(values_[x].tensor, to, dtype, values_[x].activation);
  // A node with a number the view recorded is the view's (Note [Kineto dataflow]).
  for (std::int64_t s : unit.sequences) op_of_sequence_.erase(s);
  fold(unit);
}

// An op of a step recorded without shapes: its name and time, no tensors.
void StepBuilder::build_timed_forward(Unit& unit) {
  const std::string layer = unit.layer.str();
  const std::string name = fmt::format("{}_{}", layer, ++layer_counts_[layer]);
  const OpId o = add_op(name, unit.layer, sim::Phase::kForward, unit);
  ForwardInfo info;
  info.layer = unit.layer.kind();
  info.name = name;
  for (std::int64_t s : unit.sequences) op_of_sequence_[s] = o;
  unit.op = o;
  forward_[o] = std::move(info);
  ++report_.forward_ops;
}

std::size_t StepBuilder::forward_layer(ForwardOp& f, const Unit& unit) {
  if (unit.convolution) return forward_conv(f);  // conv1d too, a generic op (Note [conv1d])
  switch (unit.layer.kind()) {
    case Layer::kBatchNorm:
      return forward_batch_norm(f);
    case Layer::kLayerNorm:
      return forward_layer_norm(f);
    case Layer::kRelu:
      return forward_relu(f);
    case Layer::kMaxPool2d:
      return forward_pool(f, true);
    case Layer::kAvgPool2d:
    case Layer::kAdaptiveAvgPool:
      return forward_pool(f, false);
    case Layer::kLinear:
      return forward_linear(f);
    case Layer::kAdd:
      return forward_add(f);
    case Layer::kSoftmaxCrossEntropy:
      return forward_cross_entropy(f);
    case Layer::kConcat:
      return forward_concat(f);
    case Layer::kDropout:
      return forward_dropout(f);
    case Layer::kEmbedding:
      return forward_embedding(f);
    default:
      return forward_generic(f);
  }
}

std::size_t StepBuilder::forward_conv(ForwardOp& f) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const TensorId w = f.weight(".weight", 1, true);
  if (dims(f.e, 2).size() == 1) f.weight(".bias", 2, true);
  const Shape& ws = dims(f.e, 1);
  Shape fallback = f.x_shape;
  fallback[1] = ws[0];
  const Shape out = lookahead(f.position, f.x_shape[0], ws[0], f.x_shape.size(), fallback);
  f.info.output = f.produce(".out", out, f.dtype);
  f.info.saved = {x, w};
  return f.output(out, f.dtype);
}

std::size_t StepBuilder::forward_batch_norm(ForwardOp& f) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const Shape channels{f.x_shape[1]};
  TensorId gamma = sim::kNoTensor;
  if (dims(f.e, 1).size() == 1) gamma = f.weight(".weight", 1, true);
  if (dims(f.e, 2).size() == 1) f.weight(".bias", 2, true);
  if (dims(f.e, 3).size() == 1) f.weight(".running_mean", 3, false);
  if (dims(f.e, 4).size() == 1) f.weight(".running_var", 4, false);
  f.info.output = f.produce(".out", f.x_shape, f.dtype);
  const TensorId mean = f.produce(".save_mean", channels, "float32");
  const TensorId invstd = f.produce(".save_invstd", channels, "float32");
  f.info.saved = {x, mean, invstd};
  if (gamma != sim::kNoTensor) f.info.saved.push_back(gamma);
  return f.output(f.x_shape, f.dtype);
}

std::size_t StepBuilder::forward_layer_norm(ForwardOp& f) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  if (!dims(f.e, 2).empty()) f.weight(".weight", 2, true);
  if (!dims(f.e, 3).empty()) f.weight(".bias", 3, true);
  f.info.output = f.produce(".out", f.x_shape, f.dtype);
  // native_layer_norm's mean and rstd: one value per normalized row (the normalized extents,
  // those of the weight, become 1), float32 as PyTorch keeps them for float32 and lower.
  // (layer_norm(x, normalized_shape, weight, bias): the shape is a scalar list, the weight has it.)
  const std::size_t normalized =
      std::min<std::size_t>(dims(f.e, 2).empty() ? 1 : dims(f.e, 2).size(), f.x_shape.size());
  Shape stats = f.x_shape;
  for (std::size_t d = stats.size() - normalized; d < stats.size(); ++d) stats[d] = 1;
  const std::string stats_dtype = f.dtype == "float64" ? f.dtype : "float32";
  const TensorId mean = f.produce(".mean", stats, stats_dtype);
  const TensorId rstd = f.produce(".rstd", stats, stats_dtype);
  f.info.saved = {x, mean, rstd};
  return f.output(f.x_shape, f.dtype);
}

std::size_t StepBuilder::forward_relu(ForwardOp& f) {
  const std::size_t xv = resolve(f.x_shape, f.dtype, true);
  f.read(xv);
  const bool in_place = f.in_place_ok(xv);
  f.info.output =
      f.produce(".out", f.x_shape, f.dtype, in_place ? values_[xv].tensor : sim::kNoTensor);
  if (in_place) values_[xv].overwritten = true;
  f.info.saved = {f.info.output};
  return f.output(f.x_shape, f.dtype);
}

std::size_t StepBuilder::forward_pool(ForwardOp& f, bool max) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const Shape out = lookahead(f.position, f.x_shape[0], f.x_shape[1], f.x_shape.size(), f.x_shape);
  f.info.output = f.produce(".out", out, f.dtype);
  if (max) {
    const TensorId indices = f.produce(".indices", out, "int64");
    f.info.saved = {x, indices};
  } else if (!subtree_has(units_[f.position].event, "aten::mean")) {
    // avg_pool2d_backward(grad, self) and _adaptive_avg_pool2d_backward(grad, self) take the
    // input; an adaptive pool to 1x1 is a mean (its subtree says so), whose backward keeps sizes.
    f.info.saved = {x};
  }
  return f.output(out, f.dtype);
}

std::size_t StepBuilder::forward_linear(ForwardOp& f) {
  const CpuEvent& e = f.e;
  const bool addmm = ends_with(e.name, "addmm");
  const std::size_t xk = addmm ? 1 : 0;
  const std::size_t wk = addmm ? 2 : 1;
  const std::size_t bk = addmm ? 0 : 2;
  const Shape& in_shape = dims(e, xk);
  if (in_shape.empty())
    fail(fmt::format("'{}' at {} us has no input shape", e.name, e.start_ns / 1000));
  const TensorId x = f.read(resolve(in_shape, dtype_of(e, xk), true));
  const TensorId w = f.weight(".weight", wk, true);
  if (dims(e, bk).size() == 1) f.weight(".bias", bk, true);
  Shape out = in_shape;
  out.back() = addmm ? dims(e, wk)[1] : dims(e, wk)[0];
  f.info.output = f.produce(".out", out, dtype_of(e, xk));
  f.info.saved = {x, w};
  return f.output(out, dtype_of(e, xk));
}

std::size_t StepBuilder::forward_add(ForwardOp& f) {
  const std::size_t av = resolve(f.x_shape, f.dtype, true);
  const std::size_t bv = resolve(dims(f.e, 1), dtype_of(f.e, 1), false, av, true);
  f.read(av);
  f.read(bv);
  values_[av].merged = true;
  values_[bv].merged = true;
  const bool in_place = f.in_place_ok(av);
  f.info.output =
      f.produce(".out", f.x_shape, f.dtype, in_place ? values_[av].tensor : sim::kNoTensor);
  if (in_place) values_[av].overwritten = true;
  const std::size_t out_value = f.output(f.x_shape, f.dtype);
  merge_boundary_ = out_value;
  return out_value;
}

std::size_t StepBuilder::forward_cross_entropy(ForwardOp& f) {
  f.read(resolve(f.x_shape, f.dtype, true));  // the logits
  TensorId target = sim::kNoTensor;
  if (!dims(f.e, 1).empty()) target = f.read(resolve_target(dims(f.e, 1), dtype_of(f.e, 1)));
  f.info.output = f.produce(".loss", {}, f.dtype);
  const TensorId log_probs = f.produce(".log_probs", f.x_shape, f.dtype);
  f.info.saved = {log_probs};
  if (target != sim::kNoTensor) f.info.saved.push_back(target);
  return f.output({}, f.dtype);
}

// A loss's target: the latest tensor of its shape that no op has read yet (a tensor of the batch,
// or labels the step shifted: HF's `labels[..., 1:].contiguous()`), else a new input. The model
// reads its inputs before the loss, so an input of the target's shape that an op read (a
// language model's token ids, which its targets share a shape with) is not the target.
std::size_t StepBuilder::resolve_target(const Shape& shape, const std::string& dtype) {
  for (std::size_t v = values_.size(); v-- > 0;) {
    const Value& value = values_[v];
    if (!value.read && !value.overwritten && value.shape == shape) return v;
  }
  return new_input(shape, dtype);
}

// cat(tensors, dim) reads each tensor of its list and writes their concatenation; CatBackward
// keeps only their sizes, so nothing is saved. The profiler records the list's shapes, not `dim`:
// it is the one extent in which they differ, else (all alike) the one whose concatenation the
// next forward op reads, else 0, torch.cat's default.
std::size_t StepBuilder::forward_concat(ForwardOp& f) {
  const std::vector<Shape>& parts = f.e.input_lists.front();
  const Shape& first = parts.front();
  std::vector<std::size_t> taken;
  std::string out_dtype = f.dtype;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    // Each part is a different tensor: the rule would otherwise give the same one each time.
    // In list order, none of them the chain's by default: a later part is often the previous
    // op's output (the last branch of an Inception or fire module).
    const std::size_t v = resolve(parts[k], f.dtype, false, SIZE_MAX, false, taken);
    f.read(v);
    taken.push_back(v);
    if (k == 0) out_dtype = values_[v].dtype;
  }
  std::optional<std::size_t> dim;
  for (const Shape& s : parts) {
    if (s.size() != first.size()) continue;
    for (std::size_t d = 0; d < s.size(); ++d) {
      if (s[d] != first[d]) dim = d;
    }
  }
  auto joined = [&](std::size_t d) {
    Shape out = first;
    out[d] = 0;
    for (const Shape& s : parts) out[d] += d < s.size() ? s[d] : 0;
    return out;
  };
  if (!dim) {
    for (std::size_t j = f.position + 1; j < units_.size() && !dim; ++j) {
      if (units_[j].role != Unit::Role::kForward) continue;
      for (std::size_t d = 0; d < first.size() && !dim; ++d) {
        if (dims(event(units_[j]), 0) == joined(d)) dim = d;
      }
      break;  // the next forward op only
    }
  }
  const Shape out = joined(dim.value_or(0));
  f.info.output = f.produce(".out", out, out_dtype);
  return f.output(out, out_dtype);
}

// embedding(weight, indices): the output is the indices' shape with a row of the weight each;
// embedding_dense_backward keeps only the indices. The table is read as any generic op's operand:
// AccumulateGrad's leaves make it a parameter unless a layer rule already has it (a table tied
// to the LM head; Note [Leaves from AccumulateGrad]).
std::size_t StepBuilder::forward_embedding(ForwardOp& f) {
  const Shape& w = dims(f.e, 0);
  const Shape& indices = dims(f.e, 1);
  if (w.size() != 2 || indices.empty()) return forward_generic(f);
  f.read(resolve(w, f.dtype, false));
  const TensorId i = f.read(resolve(indices, dtype_of(f.e, 1), false));
  Shape out = indices;
  out.push_back(w[1]);
  f.info.output = f.produce(".out", out, f.dtype);
  f.info.saved = {i};
  return f.output(out, f.dtype);
}

// Dropout in training: the input times a mask that backward reads (native_dropout's bool mask
// where the backend fuses it, CUDA; else, as on the CPU, bernoulli_ into a tensor of the input's
// dtype, scaled, then mul). Its input is not saved. With p = 0 (or in eval) PyTorch runs neither
// and returns its input: the op writes nothing and its output is its input.
std::size_t StepBuilder::forward_dropout(ForwardOp& f) {
  const std::size_t xv = resolve(f.x_shape, f.dtype, true);
  const TensorId x = f.read(xv);
  const std::size_t event = units_[f.position].event;
  const bool fused = subtree_has(event, "native_dropout");
  if (!fused && !subtree_has(event, "bernoulli")) {
    f.info.output = x;  // the input itself, no new tensor
    return xv;
  }
  f.info.output = f.produce(".out", f.x_shape, f.dtype);
  f.info.saved = {f.produce(".mask", f.x_shape, fused ? "bool" : f.dtype)};
  return f.output(f.x_shape, f.dtype);
}

std::vector<bool> StepBuilder::reshape_copies(std::size_t event) const {
  std::vector<bool> out;
  for (std::size_t child : nesting_.children[event]) {
    const std::string& name = trace_.cpu_events[child].name;
    if (name == "aten::reshape" || name == "aten::contiguous")
      out.push_back(subtree_has(child, "aten::clone"));
  }
  return out;
}

bool StepBuilder::subtree_has(std::size_t event, std::string_view needle) const {
  std::vector<std::size_t> todo{event};
  while (!todo.empty()) {
    const std::size_t i = todo.back();
    todo.pop_back();
    if (trace_.cpu_events[i].name.find(needle) != std::string::npos) return true;
    todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
  }
  return false;
}

namespace {

// Elementwise ops that broadcast their tensor operands (PyTorch's TensorIterator): the output has
// the broadcast shape, e.g. a squeeze-and-excitation's mul([N, C, 1, 1], [N, C, H, W]).
bool broadcasts(std::string_view op) {
  for (std::string_view name :
       {"mul", "div", "add", "sub", "where", "maximum", "minimum", "pow", "masked_fill", "rsub"}) {
    if (op == name ||
        (op.size() == name.size() + 1 && op.substr(0, name.size()) == name && op.back() == '_'))
      return true;
  }
  return false;
}

// What a generic op's backward keeps, by its aten name (PyTorch's derivatives.yaml): the default
// is every tensor operand (mul, div, matmul, gelu, silu...).
enum class Keeps : std::uint8_t { kOperands, kNothing, kOutput, kLaterOperands };

Keeps keeps(std::string_view op) {
  if (!op.empty() && op.back() == '_') op.remove_suffix(1);  // in place: the same formula
  // Views (their backward is a view or a scatter of the gradient, by sizes), gradients passed
  // through (add, sub, neg), copies and pads, and ops whose backward needs only sizes or
  // arguments the profiler records as scalars.
  for (std::string_view name : {"add",
                                "sub",
                                "rsub",
                                "neg",
                                "transpose",
                                "permute",
                                "t",
                                "unsqueeze",
                                "squeeze",
                                "expand",
                                "expand_as",
                                "select",
                                "slice",
                                "narrow",
                                "chunk",
                                "split",
                                "split_with_sizes",
                                "unbind",
                                "unflatten",
                                "view_as",
                                "as_strided",
                                "alias",
                                "diagonal",
                                "movedim",
                                "clone",
                                "contiguous",
                                "reshape",
                                "view",
                                "flatten",
                                "_unsafe_view",
                                "to",
                                "_to_copy",
                                "copy",
                                "pad",
                                "constant_pad_nd",
                                "roll",
                                "repeat",
                                "tril",
                                "triu",
                                "fill",
                                "zero",
                                "sum",
                                "index",
                                "stack",
                                "flip"}) {
    if (op == name) return Keeps::kNothing;
  }
  // Backward from the result: sigmoid, tanh, exp, the softmaxes.
  for (std::string_view name :
       {"sigmoid", "tanh", "exp", "softmax", "_softmax", "log_softmax", "_log_softmax"}) {
    if (op == name) return Keeps::kOutput;
  }
  if (op == "masked_fill") return Keeps::kLaterOperands;  // the mask
  return Keeps::kOperands;
}

// For each tensor a generic op's backward keeps (`saved` of them, from its operands `read`): the
// operands whose gradient needs it (derivatives.yaml; Note [What needs a gradient]). A product
// keeps each factor for the other's gradient; a quotient its divisor for either and its dividend
// for the divisor's; masked_fill its mask for its input's. Empty: kept for any gradient.
std::vector<std::vector<TensorId>> saved_for(std::string_view op, const std::vector<TensorId>& read,
                                             std::size_t saved) {
  std::vector<std::vector<TensorId>> out(saved);
  if (!op.empty() && op.back() == '_') op.remove_suffix(1);
  if (read.size() != 2) return out;
  const bool product = op == "mul" || op == "matmul" || op == "mm" || op == "bmm";
  if (product && saved == 2) {
    out[0] = {read[1]};
    out[1] = {read[0]};
  } else if (op == "div" && saved == 2) {
    out[0] = {read[1]};
  } else if (op == "masked_fill" && saved == 1) {
    out[0] = {read[0]};
  }
  return out;
}

// Broadcast shape of `a` and `b`, or nothing when they do not broadcast.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

// matmul's output: the broadcast batch extents, then [rows of a, columns of b].
std::optional<Shape> matmul_shape(const Shape& a, const Shape& b) {
  if (a.size() < 2 || b.size() < 2 || a.back() != b[b.size() - 2]) return std::nullopt;
  auto batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch) return std::nullopt;
  batch->push_back(a[a.size() - 2]);
  batch->push_back(b.back());
  return batch;
}

}  // namespace

// A generic op reads every tensor argument and writes one tensor shaped like the first (the
// broadcast shape for an elementwise op, the product's for matmul), and saves what its
// backward formula keeps (`keeps`). Its first operand is resolved as any op's; the others are the
// most recent live tensor of their shape: an op that combines the chain with another tensor
// combines it with the one made last (a squeeze-and-excitation's scale times the tensor it pooled,
// not the block's input of the same shape).
std::size_t StepBuilder::forward_generic(ForwardOp& f) {
  const CpuEvent& e = f.e;
  const std::string_view op = std::string_view(e.name).substr(e.name.find("::") + 2);
  bool first = true;
  Shape out;
  std::string out_dtype = f.dtype;
  std::vector<Shape> operands;
  std::vector<TensorId> read;
  for (std::size_t k = 0; k < e.input_dims.size(); ++k) {
    if (e.input_dims[k].empty()) continue;
    const std::size_t v = first ? resolve(e.input_dims[k], dtype_of(e, k), true)
                                : resolve_recent(e.input_dims[k], dtype_of(e, k));
    const TensorId t = f.read(v);
    if (keeps(op) == Keeps::kOperands || (keeps(op) == Keeps::kLaterOperands && !first))
      f.info.saved.push_back(t);
    read.push_back(t);
    operands.push_back(e.input_dims[k]);
    if (first) {
      out = e.input_dims[k];
      out_dtype = dtype_of(e, k);
    }
    first = false;
  }
  if (!operands.empty() && (op == "pad" || op == "constant_pad_nd"))
    out = view_shape(e).value_or(out);
  if (keeps(op) == Keeps::kNothing && !operands.empty() &&
      (op == "reshape" || op == "view" || op == "flatten"))
    out = view_shape(e).value_or(lookahead_view(f.position, operands.front()));  // a copy
  std::vector<bool> copies;
  if (operands.size() == 2) {
    std::optional<Shape> shaped;
    if (op == "matmul") {
      shaped = matmul_shape(operands[0], operands[1]);
      // matmul of batches reshapes each operand for bmm; the reshape of one that is not
      // contiguous (a transpose) is a copy (a clone in its subtree), and bmm keeps the copy.
      copies = reshape_copies(units_[f.position].event);
    } else if (broadcasts(op) && !ends_with(op, "_")) {  // in place: the first operand's shape
      shaped = broadcast(operands[0], operands[1]);
    }
    if (shaped) out = *shaped;
  }
  // Times or over a number (a Python scalar, recorded without a shape): the backward scales the
  // gradient by the number and keeps no tensor.
  if (operands.size() == 1 && (starts_with(op, "mul") || starts_with(op, "div")))
    f.info.saved.clear();
  f.info.saved_for = saved_for(op, read, f.info.saved.size());
  f.info.output = f.produce(".out", out, out_dtype);
  if (keeps(op) == Keeps::kOutput) {
    f.info.saved = {f.info.output};
    f.info.saved_for = {{}};
  }
  for (std::size_t k = 0; k < copies.size() && k < f.info.saved.size(); ++k) {
    if (copies[k]) f.info.saved[k] = f.produce(fmt::format(".copy{}", k), operands[k], out_dtype);
  }
  return f.output(out, out_dtype);
}

}  // namespace memplan::importers::detail
