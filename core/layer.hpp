#pragma once
// The layer vocabulary: every layer type memplan has rules for, and one table (kLayerRules in
// layer.cpp) that says per layer its name in traces and what it reads, saves for backward and
// needs. Code asks the table (op.layer.rule().loss, .family, .spatial_dims, ...) instead of
// comparing strings, so adding a layer is one row here plus one kernel per backend
// (Note [Adding a layer]).
//
// A layer name with no rule (the importer and the PyTorch capture produce aten ops such as
// "aten::gelu") is a generic op: it keeps its name (trace I/O writes it back unchanged) and is
// simulated like any op, from its recorded time, tensors and inputs; no backend has a kernel for
// it, and each refuses it with one line naming the op.
//
// Note [Adding a layer]: add an enumerator to Layer and its row to kLayerRules (same order), with
// its operand conventions (traces/FORMAT.md); then one forward and one backward entry in each
// backend's kernel table (host_backend/op_executor.cpp, cuda_backend/cuda_op_executor.cpp). The
// zoo's cost model has a default efficiency for layers it does not list.
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
