#include "core/layer.hpp"

#include <array>

#include "core/check.hpp"

namespace memplan::sim {

namespace {

using enum Layer;
using F = LayerFamily;
using enum Weights;
constexpr std::uint8_t kIn = kSavesInputs;
constexpr std::uint8_t kW = kSavesWeights;
constexpr std::uint8_t kY = kSavesOutput;
constexpr std::uint8_t kX = kSavesExtras;

// clang-format off
constexpr std::array<LayerRule, kLayerCount> kLayerRules{{
  // layer, name, family, weights, saves, workspace, in-place backward, loss, spatial dims,
  // forward operands, backward operands
  {kGeneric, "", F::kGeneric, kNone, kSavesNothing, false, false, false, 0,
   "as recorded", "as recorded"},
  {kConv2d, "conv2d", F::kConvolution, kWeightsAndBias, kIn | kW, true, false, false, 2,
   "x, weight, bias? → y", "dy, x, weight → dx?, dweight, dbias?"},
  {kConv3d, "conv3d", F::kConvolution, kWeightsAndBias, kIn | kW, true, false, false, 3,
   "x, weight, bias? → y", "dy, x, weight → dx?, dweight, dbias?"},
  {kLinear, "linear", F::kMatmul, kWeightsAndBias, kIn | kW, false, false, false, 0,
   "x, weight [out, in], bias? → y", "dy, x, weight → dx?, dweight, dbias?"},
  {kBatchNorm, "batch_norm", F::kNormalization, kWeights, kIn | kW | kX, false, false, false, 0,
   "x, weight, bias, running stats? → y, save_mean, save_invstd",
   "dy, x, weight, save_mean, save_invstd → dx?, dweight, dbias"},
  {kLayerNorm, "layer_norm", F::kNormalization, kWeights, kIn | kW | kX, false, false, false, 0,
   "x, weight, bias → y, mean, rstd", "dy, x, weight, mean, rstd → dx?, dweight, dbias"},
  {kRelu, "relu", F::kActivation, kNone, kY, false, true, false, 0, "x → y", "dy, y → dx"},
  {kRelu6, "relu6", F::kActivation, kNone, kIn, false, true, false, 0, "x → y", "dy, x → dx"},
  {kGelu, "gelu", F::kActivation, kNone, kIn, false, false, false, 0, "x → y", "dy, x → dx"},
  {kMaxPool2d, "max_pool2d", F::kMaxPool, kNone, kIn | kX, false, false, false, 2,
   "x → y, indices", "dy, x, indices → dx"},
  {kMaxPool3d, "max_pool3d", F::kMaxPool, kNone, kIn | kX, false, false, false, 3,
   "x → y, indices", "dy, x, indices → dx"},
  {kAvgPool2d, "avg_pool2d", F::kAvgPool, kNone, kIn, false, false, false, 2, "x → y", "dy, x → dx"},
  {kAvgPool3d, "avg_pool3d", F::kAvgPool, kNone, kIn, false, false, false, 3, "x → y", "dy, x → dx"},
  {kAdaptiveAvgPool, "adaptive_avg_pool", F::kAvgPool, kNone, kIn, false, false, false, 0,
   "x → y", "dy, x → dx"},
  {kDropout, "dropout", F::kDropout, kNone, kX, false, false, false, 0, "x → y, mask",
   "dy, mask → dx"},
  {kConcat, "concat", F::kConcat, kNone, kSavesNothing, false, false, false, 0,
   "parts... → y", "dy → dparts..."},
  {kAdd, "add", F::kSum, kNone, kSavesNothing, false, false, false, 0, "a, b, ... → sum",
   "gradients... → their sum"},
  {kGradAccumulate, "grad_accumulate", F::kSum, kNone, kSavesNothing, false, false, false, 0,
   "a, b, ... → sum", "gradients... → their sum"},
  {kSoftmax, "softmax", F::kSoftmax, kNone, kY, false, false, false, 0, "x → y",
   "dy, y → dx"},
  {kSoftmaxCrossEntropy, "softmax_cross_entropy", F::kLoss, kNone, kIn | kX, false, false, true, 0,
   "logits, labels → loss, probs", "probs, labels → dlogits"},
  {kEmbedding, "embedding", F::kEmbedding, kWeights, kIn, false, false, false, 0,
   "indices, table → y", "dy, indices → dtable"},
  {kAttentionScores, "attention_scores", F::kMatmul, kNone, kIn, false, false, false, 0,
   "qkv → scores", "dy, qkv → dqkv"},
  {kAttentionContext, "attention_context", F::kMatmul, kNone, kIn, false, false, false, 0,
   "probs, qkv → y", "dy, probs, qkv → dprobs, dqkv"},
  {kSgd, "sgd", F::kOptimizer, kNone, kSavesNothing, false, false, false, 0,
   "params..., grads..., momenta... (updated in place)", ""},
  {kAdam, "adam", F::kOptimizer, kNone, kSavesNothing, false, false, false, 0,
   "params..., grads..., exp_avgs..., exp_avg_sqs... (updated in place)", ""},
}};
// clang-format on

constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < kLayerRules.size(); ++i) {
    if (static_cast<std::size_t>(kLayerRules[i].layer) != i) return false;
  }
  return true;
}
static_assert(rows_in_order(), "kLayerRules has one row per Layer, in enumeration order");

}  // namespace

std::span<const LayerRule> layer_rules() {
  return kLayerRules;
}

const LayerRule& rule_of(Layer layer) {
  return kLayerRules[static_cast<std::size_t>(layer)];
}

Layer layer_named(std::string_view name) {
  if (name.empty()) return kGeneric;
  for (const LayerRule& r : kLayerRules) {
    if (r.name == name) return r.layer;
  }
  return kGeneric;
}

LayerType::LayerType(Layer layer) : kind_(layer) {
  MEMPLAN_CHECK(layer != kGeneric, "a generic layer is made by LayerType::named with its name");
}

LayerType LayerType::named(std::string_view name) {
  LayerType t;
  t.kind_ = layer_named(name);
  if (t.kind_ == kGeneric) t.generic_name_ = std::string(name);
  return t;
}

std::string_view LayerType::name() const {
  return generic() ? std::string_view(generic_name_) : rule().name;
}

}  // namespace memplan::sim
