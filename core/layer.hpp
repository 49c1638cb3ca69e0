#pragma once
// The layer vocabulary: every layer type memplan has rules for, and one table (kLayerRules in
// layer.cpp) that says per layer its name in traces and what it reads, saves for backward and
// needs. Code asks the table (op.layer.rule().loss, .family, .spatial_dims, ...) instead of
// comparing strings, so adding a layer is a row here and, where it needs one, an entry in the few
// tables keyed by it (Note [Adding a layer] lists them).
//
// A layer name with no rule (the importer and the PyTorch capture produce aten ops such as
// "aten::gelu") is a generic op: it keeps its name (trace I/O writes it back unchanged) and is
// simulated like any op, from its recorded time, tensors and inputs; no backend has a kernel for
// it, and each refuses it with one line naming the op.
//
// Note [Adding a layer]: every place a layer touches, by what it needs there.
//  - Its vocabulary: an enumerator in Layer (kLayerCount is the last one's + 1) and its row in
//    kLayerRules (core/layer.cpp, same order), with its operand conventions in traces/FORMAT.md.
//  - Its aten operators: rows in core/aten_layers.cpp, as called (what the Kineto importer reads)
//    and below autograd with their backward ops (what the PyTorch capture sees); the capture
//    (python/memplan/torch/recorder.py) reads them through memplan._core, so nothing in Python.
//  - Its kernels: one forward and one backward entry (update for an optimizer) in each backend's
//    kernel table (host_backend/op_executor.cpp, cuda_backend/cuda_op_executor.cpp; a convolution
//    also cuda_backend/conv_ops.cpp's algorithm choice), with the operand decoding both share in
//    runtime/op_call.cpp (which gradients a linear or convolution backward writes, an
//    optimizer's groups), runtime/initial_data.cpp where an input holds labels or indices, and
//    runtime/host_ops.cpp for an optimizer that may run on the host.
//  - The zoo: its cost model's row (zoo/cost_model.cpp's kTable, else the generic efficiency;
//    docs/zoo.md's table), and a builder in zoo/network.cpp if a zoo network uses it.
//  - The importer: a rule in importers/kineto/forward_ops.cpp (with the shapes it needs in
//    unit_roles.cpp's `fits`) when the generic one — read every tensor argument, write one
//    tensor shaped like the first, save every input — is not what it reads, writes and saves.
//  - Policies key on the family (search/policies/network_view.cpp, core/plan.cpp's Gist pairs);
//    SuperNeurons lists its checkpoint layers (search/policies/superneurons.cpp), and
//    python/memplan/torch/schedule.py's _SIGN_READERS the backward ops binarize may serve.
//  - Docs: docs/kineto-import.md's known layers, docs/torch.md's captured ones.
//  - Tests: tests/core/layer_test.cpp (the table and its aten rows),
//    tests/zoo/layer_rules_test.cpp, tests/host_backend/layer_kernels_test.cpp (gradient checks),
//    tests/cuda_backend/cuda_layers_test.cpp (against the host's kernels),
//    tests/importers/kineto/kineto_synthetic_test.cpp (the layers the importer builds).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace memplan::sim {

enum class Layer : std::uint8_t {
  kGeneric,  // no rule: an op known only by its recorded figures
  kConv2d,
  kConv3d,
  kLinear,
  kBatchNorm,
  kLayerNorm,
  kRelu,
  kRelu6,
  kGelu,
  kMaxPool2d,
  kMaxPool3d,
  kAvgPool2d,
  kAvgPool3d,
  kAdaptiveAvgPool,
  kDropout,
  kConcat,
  kAdd,
  kGradAccumulate,
  kSoftmax,
  kSoftmaxCrossEntropy,
  kEmbedding,
  kAttentionScores,
  kAttentionContext,
  kSgd,
  kAdam,
};
inline constexpr std::size_t kLayerCount = static_cast<std::size_t>(Layer::kAdam) + 1;

/// What kind of computation a layer is; policies key on these (vDNN offloads around
/// convolutions, Gist's encodings look at the ReLU→pool / ReLU→conv pairs).
enum class LayerFamily : std::uint8_t {
  kGeneric,
  kConvolution,
  kMatmul,  // linear, attention products
  kNormalization,
  kActivation,
  kMaxPool,
  kAvgPool,
  kDropout,
  kConcat,
  kSum,  // add, gradient accumulation
  kSoftmax,
  kLoss,
  kEmbedding,
  kOptimizer,
};

/// What the backward op reads after the output gradient (traces/FORMAT.md), as a bit set.
enum Saves : std::uint8_t {
  kSavesNothing = 0,
  kSavesInputs = 1,   // the forward op's data inputs (x, labels, indices, qkv, probs)
  kSavesWeights = 2,  // its parameters (weight; never the bias)
  kSavesOutput = 4,   // its primary output (y)
  kSavesExtras = 8,   // its further outputs (batch-norm statistics, pooling indices, a mask)
};

/// What a layer's forward op reads besides its data inputs.
enum class Weights : std::uint8_t {
  kNone,
  kWeights,         // one or more parameters (normalisation scale and shift, a table)
  kWeightsAndBias,  // a weight, then an optional bias
};

struct LayerRule {
  Layer layer;
  std::string_view name;  // in traces
  LayerFamily family;
  Weights weights;
  std::uint8_t saves;         // Saves bits
  bool workspace;             // may ask for a workspace buffer (convolution algorithms)
  bool in_place_backward;     // the backward may write dx over dy (it reads only dy and y)
  bool loss;                  // the forward's first output is the step's loss
  int spatial_dims;           // 2 or 3 for convolution and pooling windows, else 0
  std::string_view forward;   // operands: inputs → outputs, as in traces/FORMAT.md
  std::string_view backward;  // operands of the backward op (empty for the optimizer)
};

/// The table, one row per Layer in enumeration order (kGeneric first).
[[nodiscard]] std::span<const LayerRule> layer_rules();
[[nodiscard]] const LayerRule& rule_of(Layer layer);
/// The layer named `name` in traces, or kGeneric.
[[nodiscard]] Layer layer_named(std::string_view name);

/// An op's layer: a known Layer, or a generic one carrying the name it came with.
class LayerType {
 public:
  LayerType() = default;
  LayerType(Layer layer);  // NOLINT(google-explicit-constructor): a Layer is a LayerType
  /// The layer named `name`; a generic layer that keeps `name` when no rule has it.
  [[nodiscard]] static LayerType named(std::string_view name);

  [[nodiscard]] Layer kind() const { return kind_; }
  [[nodiscard]] const LayerRule& rule() const { return rule_of(kind_); }
  [[nodiscard]] bool generic() const { return kind_ == Layer::kGeneric; }
  /// The name in traces: the rule's, or a generic op's own.
  [[nodiscard]] std::string_view name() const;
  [[nodiscard]] std::string str() const { return std::string(name()); }

  friend bool operator==(const LayerType&, const LayerType&) = default;
  friend bool operator==(const LayerType& t, Layer layer) { return t.kind_ == layer; }

 private:
  Layer kind_ = Layer::kGeneric;
  std::string generic_name_;  // only for kGeneric
};

}  // namespace memplan::sim
