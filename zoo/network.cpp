#include "zoo/network.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/core.h>

#include "core/check.hpp"
#include "core/input_error.hpp"

namespace memplan::zoo {
namespace {

using sim::Bytes;
using sim::kNoTensor;
using sim::OpId;
using sim::TensorId;
using sim::TensorKind;

// The loss has no gradient tensor: backward starts from an implicit 1.
constexpr TensorId kSeedGradient{-2};

// Output extent of a sliding window (PyTorch's rule, including ceil_mode's "the last window must
// start inside the input or its left padding").
std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                        bool ceil_mode) {
  const std::int64_t span = in + 2 * p - k;
  if (span < 0) return 0;
  std::int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Shape or_fill(const Shape& given, std::size_t n, std::int64_t fill) {
  return given.empty() ? Shape(n, fill) : given;
}

double product(const Shape& s, std::size_t from = 0) {
  double p = 1;
  for (std::size_t i = from; i < s.size(); ++i) p *= static_cast<double>(s[i]);
  return p;
}

std::string join_shape(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(s[i]);
  }
  return out;
}

// Extents as trace attributes (lists of numbers).
std::vector<double> as_numbers(const Shape& extents) {
  return {extents.begin(), extents.end()};
}

// The dtypes autocast casts between; int64 and bool tensors it leaves alone.
bool floating(const std::string& dtype) {
  return dtype == "float32" || dtype == "bfloat16" || dtype == "float16";
}

// A dtype as a cast's name says it: x.to_bf16.
std::string_view short_name(const std::string& dtype) {
  if (dtype == "bfloat16") return "bf16";
  if (dtype == "float16") return "fp16";
  return "fp32";
}

double item_bytes(const std::string& dtype) {
  return static_cast<double>(sim::dtype_bytes(dtype).value());
}

}  // namespace

std::int64_t checked_elements(const Shape& shape, std::int64_t item_bytes,
                              const std::string& what) {
  std::int64_t elements = 1;
  for (std::int64_t extent : shape) {
    if (extent <= 0) {
      throw sim::InputError(
          "", fmt::format("{}: extent {} in shape {} (every extent must be positive)", what, extent,
                          join_shape(shape)));
    }
    if (__builtin_mul_overflow(elements, extent, &elements)) {
      throw sim::InputError("", fmt::format("{}: shape {} has more elements than 64 bits can count",
                                            what, join_shape(shape)));
    }
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, item_bytes, &bytes)) {
    throw sim::InputError("", fmt::format("{}: shape {} needs more bytes than 64 bits can count",
                                          what, join_shape(shape)));
  }
  return elements;
}

Network::Network(std::string model, std::int64_t batch, Optimizer optimizer, Precision precision)
    : model_(std::move(model)),
      batch_(batch),
      optimizer_(optimizer),
      precision_(precision),
      autocast_(autocast_dtype(precision)) {
  if (batch_ <= 0)
    throw sim::InputError("--batch", fmt::format("batch {} (must be at least 1)", batch_));
}

TensorId Network::new_tensor(const std::string& name, TensorKind kind, const Shape& shape,
                             const std::string& dtype) {
  const Bytes item = sim::dtype_bytes(dtype).value();
  const std::int64_t elements =
      checked_elements(shape, item, fmt::format("{} tensor '{}'", model_, name));
  // validate() takes a tensor over 1 PiB for a corrupt trace; say so here, with the layer's name.
  constexpr Bytes kMaxTensorBytes = Bytes{1} << 50;
  if (elements > kMaxTensorBytes / item) {
    throw sim::InputError(
        "", fmt::format("{} tensor '{}' of shape {} would need {} bytes, over the 1 PiB a trace "
                        "may hold",
                        model_, name, join_shape(shape), elements * item));
  }
  sim::Tensor t;
  t.id = sim::tensor_id(workload_.tensors.size());
  t.name = name;
  t.bytes = elements * item;
  t.kind = kind;
  t.shape = shape;
  t.dtype = dtype;
  workload_.tensors.push_back(std::move(t));
  requires_grad_.push_back(kind == TensorKind::kParameter ? 1 : 0);
  cached_cast_.push_back(kNoTensor);
  return workload_.tensors.back().id;
}

Value Network::activation(const std::string& name, const Shape& shape, const std::string& dtype) {
  return {new_tensor(name, TensorKind::kActivation, shape, dtype), shape};
}

std::string Network::widest_dtype(const std::vector<TensorId>& tensors) const {
  std::string widest;
  for (TensorId t : tensors) {
    const std::string& dtype = workload_.tensor(t).dtype;
    if (floating(dtype) && (widest.empty() || dtype == "float32")) widest = dtype;
  }
  return widest.empty() ? "float32" : widest;
}

TensorId Network::cast(const Value& x, const std::string& dtype, const std::string& consumer) {
  const sim::Tensor source = workload_.tensor(x.id);  // a copy: new_tensor() grows the list
  if (source.dtype == dtype || !floating(source.dtype)) return x.id;
  // Autocast caches the casts of leaves that need a gradient: the trainable parameters.
  const bool cached = source.kind == TensorKind::kParameter && requires_grad_[index(x.id)] != 0;
  if (cached && cached_cast_[index(x.id)] != kNoTensor) return cached_cast_[index(x.id)];
  const std::string name =
      cached ? fmt::format("{}.to_{}", source.name, short_name(dtype))
             : fmt::format("{}.{}.to_{}", consumer, source.name, short_name(dtype));
  // The copy has the shape the op sees: a view's elements (ViT's x[:, 0]), not its base's.
  const Value y = activation(name, x.shape, dtype);
  const double elements = product(x.shape);
  const OpId op = forward_op(name, sim::LayerType::named("cast"), {x.id}, {y.id}, elements);
  workload_.ops.back().bytes_moved =
      static_cast<Bytes>(elements * (item_bytes(source.dtype) + item_bytes(dtype)));
  Layer& layer = record(op, {x.id}, y.id, {});
  layer.backward_flops = elements;  // the gradient converted back to the source's dtype
  if (cached) cached_cast_[index(x.id)] = y.id;
  return y.id;
}

std::pair<std::vector<TensorId>, std::string> Network::autocast(const std::string& name,
                                                                const std::vector<Value>& inputs,
                                                                Cast policy) {
  std::vector<TensorId> ids(inputs.size());
  std::transform(inputs.begin(), inputs.end(), ids.begin(), [](const Value& v) { return v.id; });
  if (autocast_.empty()) return {ids, "float32"};
  const std::string dtype = policy == Cast::kLowPrecision ? autocast_
                            : policy == Cast::kFloat32    ? "float32"
                                                          : widest_dtype(ids);
  for (std::size_t i = 0; i < inputs.size(); ++i) ids[i] = cast(inputs[i], dtype, name);
  return {ids, dtype};
}

Value Network::input(const std::string& name, const Shape& dims) {
  Shape shape{batch_};
  shape.insert(shape.end(), dims.begin(), dims.end());
  return {new_tensor(name, TensorKind::kInput, shape, "float32"), shape};
}

Value Network::int_input(const std::string& name, const Shape& dims) {
  Shape shape{batch_};
  shape.insert(shape.end(), dims.begin(), dims.end());
  return {new_tensor(name, TensorKind::kInput, shape, "int64"), shape};
}

Value Network::parameter(const std::string& name, const Shape& shape) {
  const TensorId id = new_tensor(name, TensorKind::kParameter, shape, "float32");
  params_.push_back(id);
  parameter_elements_ += workload_.tensor(id).bytes / 4;
  return {id, shape};
}

OpId Network::forward_op(const std::string& name, const sim::LayerType& layer,
                         const std::vector<TensorId>& inputs, std::vector<TensorId> outputs,
                         double flops) {
  MEMPLAN_CHECK(!finished_, "layers are added before finish()");
  sim::Op op;
  op.id = sim::op_id(workload_.ops.size());
  op.name = name;
  op.layer = layer;
  op.phase = sim::Phase::kForward;
  op.inputs = inputs;
  op.outputs = std::move(outputs);
  op.flops = flops;
  Bytes moved = 0;
  bool needs_grad = false;
  for (TensorId t : op.inputs) {
    moved += workload_.tensor(t).bytes;
    needs_grad = needs_grad || requires_grad_[index(t)] != 0;
  }
  for (TensorId t : op.outputs) {
    moved += workload_.tensor(t).bytes;
    workload_.tensors[index(t)].producer = op.id;
    requires_grad_[index(t)] = needs_grad ? 1 : 0;
  }
  op.bytes_moved = moved;
  workload_.ops.push_back(std::move(op));
  return workload_.ops.back().id;
}

Network::Layer& Network::record(OpId op, const std::vector<TensorId>& inputs, TensorId output,
                                std::vector<TensorId> saved) {
  Layer layer;
  layer.forward = op;
  for (TensorId t : inputs) {
    if (requires_grad_[index(t)] != 0) layer.differentiable_inputs.push_back(t);
  }
  layer.saved = std::move(saved);
  layer.output = output;
  layers_.push_back(std::move(layer));
  return layers_.back();
}

Value Network::conv(const std::string& name, const Value& x, const ConvSpec& spec) {
  const std::size_t dims = spec.kernel.size();
  MEMPLAN_CHECK(dims == 2 || dims == 3, "conv2d or conv3d");
  MEMPLAN_CHECK(x.shape.size() == dims + 2, "conv input is [N, C, spatial...]");
  const std::int64_t in_channels = x.shape[1];
  MEMPLAN_CHECK(in_channels % spec.groups == 0 && spec.out_channels % spec.groups == 0,
                "groups divide both channel counts");
  const Shape stride = or_fill(spec.stride, dims, 1);
  const Shape padding = or_fill(spec.padding, dims, 0);
  Shape out{x.shape[0], spec.out_channels};
  for (std::size_t d = 0; d < dims; ++d) {
    const std::int64_t o = window_out(x.shape[d + 2], spec.kernel[d], stride[d], padding[d], false);
    if (o < 1) {
      throw sim::InputError(
          "--input", fmt::format("{}: input is too small for layer '{}' (it sees {})", model_, name,
                                 join_shape(x.shape)));
    }
    out.push_back(o);
  }
  Shape w_shape{spec.out_channels, in_channels / spec.groups};
  w_shape.insert(w_shape.end(), spec.kernel.begin(), spec.kernel.end());
  const Value w = parameter(name + ".weight", w_shape);
  std::vector<Value> operands{x, w};
  if (spec.bias) operands.push_back(parameter(name + ".bias", {spec.out_channels}));
  const auto [inputs, dtype] = autocast(name, operands, Cast::kLowPrecision);
  Value y = activation(name, out, dtype);
  const std::int64_t channels_per_group = in_channels / spec.groups;
  // 2 flops per multiply-add: every output element sums (C/g)·prod(kernel) products.
  const double macs_per_output = static_cast<double>(channels_per_group) * product(spec.kernel);
  const double flops = 2.0 * product(out) * macs_per_output;
  const OpId op = forward_op(name, dims == 2 ? sim::Layer::kConv2d : sim::Layer::kConv3d, inputs,
                             {y.id}, flops);
  // Note [Convolution workspace]: the fast algorithm is modeled as one that lowers the input to a
  // matrix (im2col, cuDNN's GEMM and the Winograd/FFT variants need buffers of that order), capped
  // at kMaxConvWorkspace as frameworks cap the workspace they let cuDNN take; a 1x1 stride-1 conv
  // is a plain GEMM and needs none. A grouped conv lowers one group at a time, so its buffer holds
  // C/groups input channels (a depthwise conv's is one channel's). The memory-optimal algorithm
  // (implicit GEMM) needs none. The lowered input has the dtype the conv runs in.
  constexpr Bytes kMaxConvWorkspace = Bytes{1} << 30;
  const bool pointwise = product(spec.kernel) == 1 && product(stride) == 1;
  Bytes workspace = 0;
  if (!pointwise) {
    const double lowered = product(out) / static_cast<double>(spec.out_channels) *
                           static_cast<double>(channels_per_group) * product(spec.kernel) *
                           item_bytes(dtype);
    workspace = static_cast<Bytes>(std::min(lowered, static_cast<double>(kMaxConvWorkspace)));
  }
  sim::Op& fop = workload_.ops.back();
  fop.attributes = {{"kernel", as_numbers(spec.kernel)},
                    {"stride", as_numbers(stride)},
                    {"padding", as_numbers(padding)},
                    {"groups", {static_cast<double>(spec.groups)}}};
  fop.workspace_bytes = workspace;
  if (workspace > 0) fop.algorithms.push_back({"memory_optimal", 0, 0});
  Layer& layer = record(op, inputs, y.id, {inputs[0], inputs[1]});
  const bool input_grad = requires_grad_[index(inputs[0])] != 0;
  layer.backward_flops = flops * (input_grad ? 2.0 : 1.0);  // dgrad (when needed) + wgrad
  layer.backward_workspace = workspace;
  layer.backward_has_memory_optimal = workspace > 0;
  return y;
}

Value Network::batch_norm(const std::string& name, const Value& x) {
  const std::int64_t c = x.shape[1];
  const Value weight = parameter(name + ".weight", {c});
  const Value bias = parameter(name + ".bias", {c});
  // Running mean and variance: persistent buffers without a gradient (not trainable parameters).
  const TensorId running =
      new_tensor(name + ".running_stats", TensorKind::kParameter, {2, c}, "float32");
  // cuDNN's batch norm writes its input's dtype (float32 weights and statistics beside it).
  Value y = activation(name, x.shape, workload_.tensor(x.id).dtype);
  const Value mean = activation(name + ".save_mean", {c});
  const Value invstd = activation(name + ".save_invstd", {c});
  const double elements = product(x.shape);
  const std::vector<TensorId> inputs{x.id, weight.id, bias.id, running};
  const OpId op =
      forward_op(name, sim::Layer::kBatchNorm, inputs, {y.id, mean.id, invstd.id}, 8.0 * elements);
  Layer& layer = record(op, inputs, y.id, {x.id, weight.id, mean.id, invstd.id});
  layer.backward_flops = 12.0 * elements;
  return y;
}

Value Network::pointwise(const std::string& name, const sim::LayerType& layer_type, const Value& x,
                         bool in_place, bool saves_output, double flops_per_element,
                         const std::string& dtype) {
  Value y = activation(name, x.shape, dtype);
  if (in_place) workload_.tensors[index(y.id)].in_place_of = x.id;
  const OpId op =
      forward_op(name, layer_type, {x.id}, {y.id}, flops_per_element * product(x.shape));
  Layer& layer = record(op, {x.id}, y.id, {saves_output ? y.id : x.id});
  layer.backward_flops = 2.0 * product(x.shape);
  return {y.id, x.shape};
}

Value Network::relu(const std::string& name, const Value& x, bool in_place) {
  return pointwise(name, sim::Layer::kRelu, x, in_place, true, 1.0, workload_.tensor(x.id).dtype);
}

Value Network::relu6(const std::string& name, const Value& x) {
  return pointwise(name, sim::Layer::kRelu6, x, false, false, 2.0, workload_.tensor(x.id).dtype);
}

Value Network::gelu(const std::string& name, const Value& x) {
  return pointwise(name, sim::Layer::kGelu, x, false, false, 8.0, workload_.tensor(x.id).dtype);
}

Value Network::pool(const std::string& name, sim::Layer layer_type, const Value& x,
                    const PoolSpec& spec, bool with_indices) {
  const std::size_t dims = spec.kernel.size();
  MEMPLAN_CHECK(x.shape.size() == dims + 2, "pool input is [N, C, spatial...]");
  const Shape stride = spec.stride.empty() ? spec.kernel : spec.stride;
  const Shape padding = or_fill(spec.padding, dims, 0);
  Shape out{x.shape[0], x.shape[1]};
  for (std::size_t d = 0; d < dims; ++d) {
    const std::int64_t o =
        window_out(x.shape[d + 2], spec.kernel[d], stride[d], padding[d], spec.ceil_mode);
    if (o < 1) {
      throw sim::InputError(
          "--input", fmt::format("{}: input is too small for layer '{}' (it sees {})", model_, name,
                                 join_shape(x.shape)));
    }
    out.push_back(o);
  }
  Value y = activation(name, out, workload_.tensor(x.id).dtype);
  std::vector<TensorId> outputs{y.id};
  std::vector<TensorId> saved{x.id};
  if (with_indices) {
    const Value indices = activation(name + ".indices", out, "int64");
    outputs.push_back(indices.id);
    saved.push_back(indices.id);
  }
  const OpId op =
      forward_op(name, layer_type, {x.id}, outputs, product(out) * product(spec.kernel));
  workload_.ops.back().attributes = {{"kernel", as_numbers(spec.kernel)},
                                     {"stride", as_numbers(stride)},
                                     {"padding", as_numbers(padding)},
                                     {"ceil_mode", {spec.ceil_mode ? 1.0 : 0.0}}};
  Layer& layer = record(op, {x.id}, y.id, saved);
  layer.backward_flops = product(x.shape);
  return y;
}

Value Network::max_pool(const std::string& name, const Value& x, const PoolSpec& spec) {
  return pool(name, spec.kernel.size() == 2 ? sim::Layer::kMaxPool2d : sim::Layer::kMaxPool3d, x,
              spec, true);
}

Value Network::avg_pool(const std::string& name, const Value& x, const PoolSpec& spec) {
  return pool(name, spec.kernel.size() == 2 ? sim::Layer::kAvgPool2d : sim::Layer::kAvgPool3d, x,
              spec, false);
}

Value Network::adaptive_avg_pool(const std::string& name, const Value& x, const Shape& out_dims) {
  MEMPLAN_CHECK(x.shape.size() == out_dims.size() + 2, "adaptive pool input is [N, C, spatial...]");
  Shape out{x.shape[0], x.shape[1]};
  out.insert(out.end(), out_dims.begin(), out_dims.end());
  Value y = activation(name, out, workload_.tensor(x.id).dtype);
  const OpId op = forward_op(name, sim::Layer::kAdaptiveAvgPool, {x.id}, {y.id}, product(x.shape));
  Layer& layer = record(op, {x.id}, y.id, {x.id});
  layer.backward_flops = product(x.shape);
  return y;
}

Value Network::flatten(const Value& x) {
  return {x.id, {x.shape[0], static_cast<std::int64_t>(product(x.shape, 1))}};
}

Value Network::linear(const std::string& name, const Value& x, std::int64_t out_features,
                      bool bias) {
  const Value w = parameter(name + ".weight", {out_features, x.shape.back()});
  return linear_with(name, x, w, bias);
}

Value Network::linear_with(const std::string& name, const Value& x, const Value& weight,
                           bool bias) {
  MEMPLAN_CHECK(weight.shape.size() == 2 && weight.shape[1] == x.shape.back(),
                "weight is [out, in]");
  const std::int64_t out_features = weight.shape[0];
  Shape out = x.shape;
  out.back() = out_features;
  std::vector<Value> operands{x, weight};
  if (bias) operands.push_back(parameter(name + ".bias", {out_features}));
  const auto [inputs, dtype] = autocast(name, operands, Cast::kLowPrecision);
  Value y = activation(name, out, dtype);
  const double flops = 2.0 * product(x.shape) * static_cast<double>(out_features);
  const OpId op = forward_op(name, sim::Layer::kLinear, inputs, {y.id}, flops);
  Layer& layer = record(op, inputs, y.id, {inputs[0], inputs[1]});
  layer.backward_flops = flops * (requires_grad_[index(inputs[0])] != 0 ? 2.0 : 1.0);
  return y;
}

Value Network::add(const std::string& name, const Value& a, const Value& b, bool in_place) {
  MEMPLAN_CHECK(product(a.shape) == product(b.shape), "add of equal shapes");
  // In place, the sum takes a's dtype; else the wider of the two (type promotion).
  Value y = activation(name, a.shape,
                       in_place ? workload_.tensor(a.id).dtype : widest_dtype({a.id, b.id}));
  if (in_place) workload_.tensors[index(y.id)].in_place_of = a.id;
  const OpId op = forward_op(name, sim::Layer::kAdd, {a.id, b.id}, {y.id}, product(a.shape));
  Layer& layer = record(op, {a.id, b.id}, y.id, {});
  layer.pass_through = true;
  return y;
}

Value Network::concat(const std::string& name, const std::vector<Value>& parts) {
  MEMPLAN_CHECK(!parts.empty(), "concat of at least one part");
  Shape out = parts.front().shape;
  out[1] = 0;
  for (const Value& p : parts) out[1] += p.shape[1];
  const auto [inputs, dtype] = autocast(name, parts, Cast::kWidest);
  Value y = activation(name, out, dtype);
  const OpId op = forward_op(name, sim::Layer::kConcat, inputs, {y.id}, 0.0);
  Layer& layer = record(op, inputs, y.id, {});
  layer.backward_flops = 0.0;
  return y;
}

Value Network::dropout(const std::string& name, const Value& x) {
  Value y = activation(name, x.shape, workload_.tensor(x.id).dtype);
  const Value mask = activation(name + ".mask", x.shape, "bool");
  const OpId op =
      forward_op(name, sim::Layer::kDropout, {x.id}, {y.id, mask.id}, 2.0 * product(x.shape));
  Layer& layer = record(op, {x.id}, y.id, {mask.id});
  layer.backward_flops = product(x.shape);
  return {y.id, x.shape};
}

Value Network::softmax_cross_entropy(const std::string& name, const Value& logits,
                                     const Value& labels) {
  MEMPLAN_CHECK(loss_.empty(), "one loss per network");
  const std::vector<TensorId> inputs = autocast(name, {logits, labels}, Cast::kFloat32).first;
  Value loss = activation(name, {1});
  const Value probs = activation(name + ".probs", logits.shape);
  const OpId op = forward_op(name, sim::Layer::kSoftmaxCrossEntropy, inputs, {loss.id, probs.id},
                             5.0 * product(logits.shape));
  Layer& layer = record(op, {inputs[0]}, loss.id, {probs.id, labels.id});
  layer.backward_flops = 2.0 * product(logits.shape);
  loss_.push_back(loss.id);
  return loss;
}

Value Network::layer_norm(const std::string& name, const Value& x) {
  const std::int64_t h = x.shape.back();
  const Value weight = parameter(name + ".weight", {h});
  const Value bias = parameter(name + ".bias", {h});
  const Shape rows(x.shape.begin(), x.shape.end() - 1);
  const std::vector<TensorId> inputs = autocast(name, {x, weight, bias}, Cast::kFloat32).first;
  Value y = activation(name, x.shape);
  const Value mean = activation(name + ".mean", rows);
  const Value rstd = activation(name + ".rstd", rows);
  const OpId op = forward_op(name, sim::Layer::kLayerNorm, inputs, {y.id, mean.id, rstd.id},
                             8.0 * product(x.shape));
  Layer& layer = record(op, inputs, y.id, {inputs[0], weight.id, mean.id, rstd.id});
  layer.backward_flops = 12.0 * product(x.shape);
  return y;
}

Value Network::embedding(const std::string& name, const Value& indices, const Value& table) {
  Shape out = indices.shape;
  out.push_back(table.shape[1]);
  Value y = activation(name, out, workload_.tensor(table.id).dtype);
  const OpId op = forward_op(name, sim::Layer::kEmbedding, {indices.id, table.id}, {y.id}, 0.0);
  Layer& layer = record(op, {indices.id, table.id}, y.id, {indices.id});
  layer.backward_flops = product(out);
  return y;
}

Value Network::attention_scores(const std::string& name, const Value& qkv, std::int64_t heads,
                                bool causal) {
  MEMPLAN_CHECK(qkv.shape.size() == 3 && qkv.shape[2] % (3 * heads) == 0, "qkv is [B, S, 3H]");
  const std::int64_t b = qkv.shape[0];
  const std::int64_t s = qkv.shape[1];
  const auto [inputs, dtype] = autocast(name, {qkv}, Cast::kLowPrecision);
  Value y = activation(name, {b, heads, s, s}, dtype);
  const std::int64_t hidden = qkv.shape[2] / 3;
  const double flops = 2.0 * static_cast<double>(b) * static_cast<double>(s) *
                       static_cast<double>(s) * static_cast<double>(hidden);
  const OpId op = forward_op(name, sim::Layer::kAttentionScores, inputs, {y.id}, flops);
  if (!causal) workload_.ops.back().attributes = {{"causal", {0.0}}};
  Layer& layer = record(op, inputs, y.id, inputs);
  layer.backward_flops = 2.0 * flops;
  return y;
}

Value Network::softmax(const std::string& name, const Value& x) {
  // Autocast's softmax reads its input as it is and writes float32 (fp32_set_opt_dtype).
  return pointwise(name, sim::Layer::kSoftmax, x, false, true, 5.0, "float32");
}

Value Network::attention_context(const std::string& name, const Value& probs, const Value& qkv) {
  const std::int64_t b = qkv.shape[0];
  const std::int64_t s = qkv.shape[1];
  const std::int64_t h = qkv.shape[2] / 3;
  const auto [inputs, dtype] = autocast(name, {probs, qkv}, Cast::kLowPrecision);
  Value y = activation(name, {b, s, h}, dtype);
  const double flops = 2.0 * static_cast<double>(b) * static_cast<double>(s) *
                       static_cast<double>(s) * static_cast<double>(h);
  const OpId op = forward_op(name, sim::Layer::kAttentionContext, inputs, {y.id}, flops);
  Layer& layer = record(op, inputs, y.id, inputs);
  layer.backward_flops = 2.0 * flops;
  return y;
}

Value Network::scaled_dot_product_attention(const std::string& name, const Value& qkv,
                                            std::int64_t heads, bool causal, bool dropout) {
  MEMPLAN_CHECK(qkv.shape.size() == 3 && qkv.shape[2] % (3 * heads) == 0, "qkv is [B, S, 3H]");
  const std::int64_t b = qkv.shape[0];
  const std::int64_t s = qkv.shape[1];
  const std::int64_t h = qkv.shape[2] / 3;
  const std::int64_t d = h / heads;
  // Note [Fused attention] in zoo/attention.hpp. Autocast runs it in the low dtype (a
  // lower-precision op); without autocast PyTorch takes the memory-efficient kernel, whose
  // log-sum-exp rows are padded to a multiple of 32, and flash's backward workspace is not needed.
  const auto [inputs, dtype] = autocast(name, {qkv}, Cast::kLowPrecision);
  const bool flash = !autocast_.empty();
  const auto round_up = [](std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; };
  Value y = activation(name, {b, s, h}, dtype);
  const Value lse = activation(name + ".logsumexp", {b, heads, flash ? s : round_up(s, 32)});
  std::vector<TensorId> outputs{y.id, lse.id};
  std::vector<TensorId> saved{inputs[0], y.id, lse.id};
  if (dropout) {
    const Value rng = activation(name + ".rng_state", {2}, "int64");
    outputs.push_back(rng.id);
    saved.push_back(rng.id);
  }
  // Q·Kᵀ and P·V, 2·B·S²·H flops each; the causal mask skips half the blocks.
  const double flops = 4.0 * static_cast<double>(b) * static_cast<double>(s) *
                       static_cast<double>(s) * static_cast<double>(h) * (causal ? 0.5 : 1.0);
  const OpId op =
      forward_op(name, sim::LayerType::named(kFusedAttentionOp), inputs, std::move(outputs), flops);
  if (!causal) workload_.ops.back().attributes = {{"causal", {0.0}}};  // as the scores op's
  Layer& layer = record(op, inputs, y.id, std::move(saved));
  layer.backward_flops = 2.5 * flops;
  if (flash) {
    // flash_api.cpp's dq_accum [B, S₁₂₈, heads, d₃₂] and softmax_d [B, heads, S₁₂₈], float32.
    const std::int64_t rows = round_up(s, 128);
    const std::int64_t width = round_up(d, d <= 128 ? 32 : 64);
    layer.backward_workspace = b * heads * rows * (width + 1) * 4;
  }
  return y;
}

Value Network::with_constant(const std::string& name, const sim::LayerType& layer_type,
                             const Value& x, bool sum) {
  Value y = activation(name, x.shape, workload_.tensor(x.id).dtype);
  const OpId op = forward_op(name, layer_type, {x.id}, {y.id}, product(x.shape));
  Layer& layer = record(op, {x.id}, y.id, {});
  layer.pass_through = sum;
  layer.backward_flops = product(x.shape);
  return {y.id, x.shape};
}

// Note [Unfused GELU]
// ~~~~~~~~~~~~~~~~~~~
// Hugging Face's GPT-2 (activation_function "gelu_new", NewGELUActivation) computes the tanh
// approximation of GELU term by term in Python,
//   0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
// so eager PyTorch runs eight elementwise kernels where torch's GELU is one, each reading and
// writing its whole tensor: pow, a product by 0.044715, the sum with x, a product by √(2/π),
// tanh, the sum with 1, the product 0.5·x and the product of the two halves. Under autocast
// pow is a float32 op (autocast's op reference): x is cast to float32 first, and every term
// after it is float32 by type promotion but 0.5·x (x's dtype), so the result is float32 and the
// next linear layer casts it back. Autograd saves pow's (float32) input, tanh's output and both
// factors of the last product; the products by a constant and the sums save nothing, and a sum's
// backward is no kernel. `memplan zoo gpt --activation gelu_new` builds it (the ops
// "<name>.pow" ... "<name>.mul"); the default is one fused GELU (`gelu`, Hugging Face's
// "gelu_pytorch_tanh" and torch.nn.GELU).
Value Network::gelu_new(const std::string& name, const Value& x) {
  const std::vector<TensorId> wide = autocast(name + ".pow", {x}, Cast::kFloat32).first;
  const Value x32{wide[0], x.shape};
  const std::string dtype = workload_.tensor(x32.id).dtype;
  const Value cube =
      pointwise(name + ".pow", sim::LayerType::named("pow"), x32, false, false, 2.0, dtype);
  const sim::LayerType mul = sim::LayerType::named("mul");
  const Value scaled = with_constant(name + ".mul_0044715", mul, cube, false);
  const Value inner = add(name + ".add_x", x, scaled, false);
  const Value angle = with_constant(name + ".mul_sqrt_2_pi", mul, inner, false);
  const Value tanh = pointwise(name + ".tanh", sim::LayerType::named("tanh"), angle, false, true,
                               4.0, workload_.tensor(angle.id).dtype);
  const Value one_plus = with_constant(name + ".add_1", sim::Layer::kAdd, tanh, true);
  const Value half = with_constant(name + ".mul_half", mul, x, false);
  return Network::mul(name + ".mul", half, one_plus);
}

Value Network::rms_norm(const std::string& name, const Value& x) {
  const std::int64_t h = x.shape.back();
  const Value weight = parameter(name + ".weight", {h});
  const Shape rows(x.shape.begin(), x.shape.end() - 1);
  const std::vector<TensorId> inputs = autocast(name, {x, weight}, Cast::kFloat32).first;
  Value y = activation(name, x.shape);
  const Value rstd = activation(name + ".rstd", rows);
  // Per element: square and sum, then scale by rstd and by the weight; backward twice that (dx's
  // row dot product and rescaling, dweight's sum).
  const OpId op = forward_op(name, sim::LayerType::named("rms_norm"), inputs, {y.id, rstd.id},
                             4.0 * product(x.shape));
  Layer& layer = record(op, inputs, y.id, {inputs[0], weight.id, rstd.id});
  layer.backward_flops = 8.0 * product(x.shape);
  return y;
}

Value Network::silu(const std::string& name, const Value& x) {
  return pointwise(name, sim::LayerType::named("silu"), x, false, false, 4.0,
                   workload_.tensor(x.id).dtype);
}

Value Network::mul(const std::string& name, const Value& a, const Value& b) {
  MEMPLAN_CHECK(a.shape == b.shape, "mul of equal shapes");
  Value y = activation(name, a.shape, widest_dtype({a.id, b.id}));
  const OpId op =
      forward_op(name, sim::LayerType::named("mul"), {a.id, b.id}, {y.id}, product(a.shape));
  // Autograd's MulBackward0 keeps b for a's gradient and a for b's.
  const bool a_grad = requires_grad_[index(a.id)] != 0;
  const bool b_grad = requires_grad_[index(b.id)] != 0;
  std::vector<TensorId> saved;
  if (b_grad) saved.push_back(a.id);
  if (a_grad) saved.push_back(b.id);
  Layer& layer = record(op, {a.id, b.id}, y.id, saved);
  // One product per element for each gradient (each saved operand serves one).
  layer.backward_flops = static_cast<double>(saved.size()) * product(a.shape);
  return y;
}

RotaryTables Network::rotary_tables(const std::string& name, std::int64_t sequence,
                                    std::int64_t head_dim) {
  MEMPLAN_CHECK(head_dim % 2 == 0, "rotary heads have an even width");
  // A persistent buffer without a gradient (register_buffer), not a trainable parameter.
  const TensorId inv_freq =
      new_tensor(name + ".inv_freq", TensorKind::kParameter, {head_dim / 2}, "float32");
  requires_grad_[index(inv_freq)] = 0;
  const Value cos = activation(name + ".cos", {sequence, head_dim});
  const Value sin = activation(name + ".sin", {sequence, head_dim});
  // A cos and a sin per table element (the angles are one product per position and frequency).
  forward_op(name, sim::LayerType::named("rotary_tables"), {inv_freq}, {cos.id, sin.id},
             2.0 * product(cos.shape));
  return {cos, sin};
}

Value Network::rotary_embedding(const std::string& name, const Value& qkv,
                                const RotaryTables& tables, std::int64_t heads,
                                std::int64_t kv_heads) {
  const std::int64_t head_dim = tables.cos.shape.back();
  MEMPLAN_CHECK(qkv.shape.size() == 3 && qkv.shape[2] == (heads + 2 * kv_heads) * head_dim,
                "qkv is [B, S, (heads + 2·kv_heads)·d]");
  Value y = activation(name, qkv.shape, workload_.tensor(qkv.id).dtype);  // in place
  workload_.tensors[index(y.id)].in_place_of = qkv.id;
  const std::vector<TensorId> inputs{qkv.id, tables.cos.id, tables.sin.id};
  // Per rotated element (query and key heads): two products and a sum; backward the same.
  const double rotated = product(qkv.shape) / static_cast<double>(heads + 2 * kv_heads) *
                         static_cast<double>(heads + kv_heads);
  const OpId op =
      forward_op(name, sim::LayerType::named("rotary_embedding"), inputs, {y.id}, 3.0 * rotated);
  Layer& layer = record(op, inputs, y.id, {tables.cos.id, tables.sin.id});
  layer.backward_flops = 3.0 * rotated;
  return y;
}

Value Network::repeat_kv(const std::string& name, const Value& qkv, std::int64_t heads,
                         std::int64_t kv_heads) {
  MEMPLAN_CHECK(
      qkv.shape.size() == 3 && qkv.shape[2] % (heads + 2 * kv_heads) == 0 && heads % kv_heads == 0,
      "qkv is [B, S, (heads + 2·kv_heads)·d] and kv_heads divide heads");
  const std::int64_t head_dim = qkv.shape[2] / (heads + 2 * kv_heads);
  Value y = activation(name, {qkv.shape[0], qkv.shape[1], 3 * heads * head_dim},
                       workload_.tensor(qkv.id).dtype);
  const OpId op = forward_op(name, sim::LayerType::named("repeat_kv"), {qkv.id}, {y.id}, 0.0);
  Layer& layer = record(op, {qkv.id}, y.id, {});
  // Backward sums each key and value head's copies: one add per copied key and value element.
  layer.backward_flops = product(y.shape) * 2.0 / 3.0;
  return y;
}

Value Network::patch_tokens(const std::string& name, const Value& patches, const Value& class_token,
                            const Value& positions) {
  MEMPLAN_CHECK(patches.shape.size() == 4, "patches are [B, C, h, w]");
  const std::int64_t c = patches.shape[1];
  const std::int64_t tokens = 1 + patches.shape[2] * patches.shape[3];
  MEMPLAN_CHECK(class_token.shape == Shape({1, 1, c}) && positions.shape == Shape({1, tokens, c}),
                "the class token is [1, 1, C] and the position embedding [1, 1 + h·w, C]");
  // torch.cat promotes the patches to the parameters' float32 under autocast.
  const auto [inputs, dtype] = autocast(name, {patches, class_token, positions}, Cast::kWidest);
  Value y = activation(name, {patches.shape[0], tokens, c}, dtype);
  // The position add (the cat copies); backward sums the batch for the two parameters' gradients.
  const OpId op =
      forward_op(name, sim::LayerType::named("patch_tokens"), inputs, {y.id}, product(y.shape));
  Layer& layer = record(op, inputs, y.id, {});
  layer.backward_flops = product(y.shape);
  return y;
}

Value Network::first_token(const Value& x) {
  MEMPLAN_CHECK(x.shape.size() == 3, "tokens are [B, S, C]");
  return {x.id, {x.shape[0], x.shape[2]}};
}

TensorId Network::gradient_in_dtype(TensorId tensor, TensorId gradient, const std::string& add) {
  const sim::Tensor base = workload_.tensor(tensor);  // a copy: new_tensor() grows the list
  const sim::Tensor incoming = workload_.tensor(gradient);
  if (incoming.dtype == base.dtype) return gradient;
  sim::Op op;
  op.id = sim::op_id(workload_.ops.size());
  op.name = fmt::format("{}_bwd.{}.to_{}", add, base.name, short_name(base.dtype));
  op.layer = sim::LayerType::named("cast");
  op.phase = sim::Phase::kBackward;
  const TensorId g = new_tensor("d_" + base.name, TensorKind::kGradient, base.shape, base.dtype);
  op.inputs = {gradient};
  op.outputs = {g};
  op.flops = product(base.shape);
  op.bytes_moved = incoming.bytes + workload_.tensor(g).bytes;
  workload_.tensors[index(g)].producer = op.id;
  workload_.ops.push_back(std::move(op));
  return g;
}

void Network::contribute(TensorId tensor, TensorId gradient) {
  const auto t = index(tensor);
  MEMPLAN_CHECK(expected_grads_[t] > 0, "a tensor receives as many gradients as it has consumers");
  --expected_grads_[t];
  if (grad_[t] == kNoTensor) {
    grad_[t] = gradient;
    return;
  }
  // Fan-out: autograd sums the gradients as they arrive (its input buffer accumulates).
  const sim::Tensor base = workload_.tensor(tensor);  // a copy: new_tensor() grows the list
  const std::string prefix = base.kind == TensorKind::kParameter ? "g_" : "d_";
  const TensorId sum =
      new_tensor(fmt::format("{}{}.acc{}", prefix, base.name, workload_.ops.size()),
                 TensorKind::kGradient, base.shape, base.dtype);
  sim::Op op;
  op.id = sim::op_id(workload_.ops.size());
  op.name = fmt::format("{}.grad_accumulate", base.name);
  op.layer = sim::Layer::kGradAccumulate;
  op.phase = sim::Phase::kBackward;
  op.inputs = {grad_[t], gradient};
  op.outputs = {sum};
  op.flops = product(base.shape);
  op.bytes_moved = 3 * base.bytes;
  workload_.tensors[index(sum)].producer = op.id;
  workload_.ops.push_back(std::move(op));
  grad_[t] = sum;
}

std::vector<char> Network::start_backward() {
  const std::size_t forward_tensors = workload_.tensors.size();
  std::vector<char> reaches(forward_tensors, 0);
  reaches[index(loss_.front())] = 1;
  std::vector<char> on_path(layers_.size(), 0);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    if (reaches[index(layers_[i].output)] == 0) continue;
    on_path[i] = 1;
    for (TensorId t : layers_[i].differentiable_inputs) reaches[index(t)] = 1;
  }
  expected_grads_.assign(forward_tensors, 0);
  grad_.assign(forward_tensors, kNoTensor);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (on_path[i] == 0) continue;
    for (TensorId t : layers_[i].differentiable_inputs) ++expected_grads_[index(t)];
  }
  grad_[index(loss_.front())] = kSeedGradient;
  return on_path;
}

void Network::add_backward_op(const Layer& layer, TensorId grad_out) {
  const sim::Op& fwd = workload_.op(layer.forward);
  sim::Op op;
  op.id = sim::op_id(workload_.ops.size());
  op.name = fwd.name + "_bwd";
  op.layer = fwd.layer;
  op.phase = sim::Phase::kBackward;
  op.differentiates = fwd.id;
  op.attributes = fwd.attributes;
  if (grad_out != kSeedGradient) op.inputs.push_back(grad_out);
  op.inputs.insert(op.inputs.end(), layer.saved.begin(), layer.saved.end());
  std::vector<std::pair<TensorId, TensorId>> produced;  // (tensor, its gradient)
  for (TensorId t : layer.differentiable_inputs) {
    const sim::Tensor base = workload_.tensor(t);
    const std::string prefix = base.kind == TensorKind::kParameter ? "g_" : "d_";
    const TensorId g =
        new_tensor(prefix + base.name, TensorKind::kGradient, base.shape, base.dtype);
    workload_.tensors[index(g)].producer = op.id;
    op.outputs.push_back(g);
    produced.emplace_back(t, g);
  }
  op.flops = layer.backward_flops;
  Bytes moved = 0;
  for (TensorId t : op.inputs) moved += workload_.tensor(t).bytes;
  for (TensorId t : op.outputs) moved += workload_.tensor(t).bytes;
  op.bytes_moved = moved;
  op.workspace_bytes = layer.backward_workspace;
  if (layer.backward_has_memory_optimal) op.algorithms.push_back({"memory_optimal", 0, 0});
  workload_.ops.push_back(std::move(op));
  for (const auto& [t, g] : produced) contribute(t, g);
}

// The optimizer step over every trainable parameter at once, reading [params, grads, state...]
// in equal groups and updating params and state in place (traces/FORMAT.md):
// - SGD with momentum: m = μ·m + g; p -= lr·m. One state (the momentum buffer); about 4 flops
//   per element; reads 3 and writes 2 tensors per parameter.
// - Adam (torch.optim.Adam, its defaults as attributes; step 1: the one step of the trace):
//   m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²; p -= lr/(1-β1^t) · m / (√v/√(1-β2^t) + ε). Two
//   states (exp_avg, exp_avg_sq); about 12 flops per element; reads 4 and writes 3 tensors.
// With fp16, GradScaler's unscale_ (torch._amp_foreach_non_finite_check_and_unscale_) first reads
// every gradient and writes it back divided by the scale: one flop, one more read and one more
// write per element, counted in the update op.
void Network::add_update() {
  const bool adam = optimizer_ == Optimizer::kAdam;
  sim::Op update;
  update.id = sim::op_id(workload_.ops.size());
  update.name = adam ? "adam" : "sgd";
  update.layer = adam ? sim::Layer::kAdam : sim::Layer::kSgd;
  update.phase = sim::Phase::kUpdate;
  if (adam) {
    update.attributes = {{"lr", {1e-3}},
                         {"betas", {0.9, 0.999}},
                         {"eps", {1e-8}},
                         {"weight_decay", {0.0}},
                         {"step", {1.0}}};
  }
  const std::vector<std::string> state_prefixes =
      adam ? std::vector<std::string>{"exp_avg_", "exp_avg_sq_"} : std::vector<std::string>{"m_"};
  std::vector<TensorId> grads;
  std::vector<std::vector<TensorId>> states(state_prefixes.size());
  double elements = 0;
  for (TensorId p : params_) {
    const TensorId g = grad_[index(p)];
    MEMPLAN_CHECK(g != kNoTensor && expected_grads_[index(p)] == 0,
                  "every parameter has its full gradient before the update");
    const sim::Tensor param = workload_.tensor(p);  // a copy: new_tensor() grows the list
    grads.push_back(g);
    for (std::size_t s = 0; s < states.size(); ++s) {
      states[s].push_back(new_tensor(state_prefixes[s] + param.name, TensorKind::kOptimizerState,
                                     param.shape, param.dtype));
    }
    elements += static_cast<double>(param.bytes) / 4.0;
  }
  update.inputs = params_;
  update.inputs.insert(update.inputs.end(), grads.begin(), grads.end());
  for (const std::vector<TensorId>& group : states) {
    update.inputs.insert(update.inputs.end(), group.begin(), group.end());
  }
  // Reads params, grads and every state; writes params and every state back; 4 bytes an element.
  const auto state_count = static_cast<double>(states.size());
  const bool unscale = precision_ == Precision::kFp16;
  const double tensors_moved = (2.0 + state_count) + (1.0 + state_count) + (unscale ? 2.0 : 0.0);
  update.flops = ((adam ? 12.0 : 4.0) + (unscale ? 1.0 : 0.0)) * elements;
  update.bytes_moved = static_cast<Bytes>(tensors_moved * 4.0 * elements);
  workload_.ops.push_back(std::move(update));
}

sim::Workload Network::finish() {
  MEMPLAN_CHECK(!finished_, "finish() once");
  MEMPLAN_CHECK(loss_.size() == 1, "a network ends in a loss");
  finished_ = true;
  const std::vector<char> on_path = start_backward();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    if (on_path[i] == 0) continue;
    const Layer& layer = layers_[i];
    const TensorId grad_out = grad_[index(layer.output)];
    MEMPLAN_CHECK(grad_out != kNoTensor,
                  "every consumer's gradient has arrived when a layer's turn comes");
    if (layer.pass_through) {
      for (TensorId t : layer.differentiable_inputs) {
        contribute(t, gradient_in_dtype(t, grad_out, workload_.op(layer.forward).name));
      }
    } else {
      add_backward_op(layer, grad_out);
    }
  }
  add_update();
  workload_.provenance.note = model_;
  return std::move(workload_);
}

std::size_t relu_backward_in_place(sim::Workload& workload) {
  std::vector<int> readers(workload.tensors.size(), 0);
  std::vector<char> overwritten(workload.tensors.size(), 0);
  for (const sim::Op& op : workload.ops) {
    for (TensorId t : op.inputs) ++readers[index(t)];
  }
  for (const sim::Tensor& t : workload.tensors) {
    if (t.in_place_of != kNoTensor) overwritten[index(t.in_place_of)] = 1;
  }
  std::size_t changed = 0;
  for (const sim::Op& op : workload.ops) {
    if (op.phase != sim::Phase::kBackward || !op.layer.rule().in_place_backward) continue;
    if (op.inputs.empty() || op.outputs.size() != 1) continue;
    const sim::Tensor& incoming = workload.tensor(op.inputs.front());
    sim::Tensor& out = workload.tensors[index(op.outputs.front())];
    const auto in = index(incoming.id);
    if (incoming.kind != TensorKind::kGradient || readers[in] != 1 || overwritten[in] != 0 ||
        out.in_place_of != kNoTensor || out.bytes > incoming.bytes) {
      continue;
    }
    out.in_place_of = incoming.id;
    overwritten[in] = 1;
    ++changed;
  }
  return changed;
}

std::size_t int32_pool_indices(sim::Workload& workload) {
  std::size_t changed = 0;
  for (const sim::Op& op : workload.ops) {
    if (op.phase != sim::Phase::kForward || op.layer.rule().family != sim::LayerFamily::kMaxPool)
      continue;
    for (TensorId t : op.outputs) {
      sim::Tensor& tensor = workload.tensors[index(t)];
      if (tensor.dtype != "int64") continue;
      tensor.dtype = "int32";
      tensor.bytes /= 2;
      ++changed;
    }
  }
  return changed;
}

}  // namespace memplan::zoo
