#pragma once
// The model registry: every network the zoo can build, with its default input and whether it
// takes --depth, and build_model() that turns a name and options into a workload without costs.
// One file per family (alexnet.cpp, resnet.cpp, ...) implements the builders declared here.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/workload.hpp"
#include "zoo/attention.hpp"
#include "zoo/network.hpp"

namespace memplan::zoo {

/// A decoder's shape as asked for (the --layers... flags): a field left empty takes the model's
/// default (gpt: GPT-2 small, 124.4M parameters; llama: a small LLaMA, zoo/llama.cpp).
struct TransformerOptions {
  std::optional<std::int64_t> layers{};
  std::optional<std::int64_t> hidden{};
  std::optional<std::int64_t> heads{};
  std::optional<std::int64_t> sequence{};
  std::optional<std::int64_t> vocab{};
  std::optional<std::int64_t> intermediate{};  // the MLP's inner width
  std::optional<std::int64_t> kv_heads{};      // key and value heads (grouped-query attention)
};

/// A decoder's shape with every field decided (TransformerOptions over the model's defaults).
struct TransformerShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t sequence = 0;
  std::int64_t vocab = 0;
  std::int64_t intermediate = 0;
  std::int64_t kv_heads = 0;  // fewer than heads: each key and value head serves heads/kv_heads
};

/// GPT's MLP activation (`memplan zoo gpt --activation`; GPT2Config.activation_function's names).
enum class GptActivation : std::uint8_t {
  kGelu,     // one fused GELU kernel (torch.nn.GELU; Hugging Face's "gelu_pytorch_tanh")
  kGeluNew,  // Hugging Face's default "gelu_new": eight elementwise ops (Note [Unfused GELU])
};

struct ModelOptions {
  std::int64_t batch = 1;
  Shape input;                        // spatial extents (HxW or TxHxW); empty = the model's default
  std::optional<std::int64_t> depth;  // deep residual family only
  TransformerOptions transformer;
  Optimizer optimizer = Optimizer::kSgd;   // the update op and the state per parameter
  Precision precision = Precision::kFp32;  // the dtypes (Note [Training precision])
  /// The attention's kernels (models with attention only); empty: default_attention(precision).
  std::optional<AttentionKernel> attention;
  std::optional<GptActivation> activation;  // gpt only; empty: kGelu
  /// The activations in NHWC (torch.channels_last), else NCHW, PyTorch's default: the cost of a
  /// tensor-core convolution (Note [Tensor-core convolutions] in zoo/cost_model.cpp).
  bool channels_last = false;
};

/// The attention kernel `options` ask for, or the precision's default (Note [Fused attention]).
AttentionKernel attention_kernel(const ModelOptions& options);

using ModelBuilder = void (*)(Network&, const ModelOptions&);
/// A decoder's shape from its options, its defaults filling what they leave empty; throws
/// InputError for an option the decoder does not take.
using DecoderShape = TransformerShape (*)(const TransformerOptions&);

struct ModelInfo {
  std::string_view name;
  std::string_view summary;
  int input_dims = 2;  // 2: HxW image, 3: TxHxW clip, 0: token sequence (a decoder)
  Shape default_input;
  bool takes_depth = false;
  ModelBuilder build = nullptr;
  /// Another name find_model() accepts (the and the papers' name), or empty.
  std::string_view alias;
  DecoderShape decoder_shape = nullptr;  // decoders only (input_dims 0)
  bool attention = false;                // has self-attention: takes --attention
};

struct BuiltModel {
  sim::Workload workload;            // durations zero until a cost model is applied
  std::int64_t parameter_count = 0;  // trainable elements
};

const std::vector<ModelInfo>& models();
/// The model named `name` or aliased so; nullptr when there is no such model.
const ModelInfo* find_model(std::string_view name);

/// Checks the options against the model (input rank, depth) and builds it. Throws InputError.
BuiltModel build_model(const ModelInfo& model, const ModelOptions& options);

// Family builders (one file each).
void build_alexnet(Network& net, const ModelOptions& options);
void build_overfeat(Network& net, const ModelOptions& options);
void build_vgg16(Network& net, const ModelOptions& options);
void build_googlenet(Network& net, const ModelOptions& options);
/// torchvision's ResNet-`depth` for 18/34/50/101/152; see resnet.cpp for other depths.
void build_resnet(Network& net, const ModelOptions& options, std::int64_t depth);
void build_resnext3d(Network& net, const ModelOptions& options);
void build_densenet121(Network& net, const ModelOptions& options);
void build_mobilenet_v2(Network& net, const ModelOptions& options);
void build_transformer(Network& net, const ModelOptions& options);
void build_llama(Network& net, const ModelOptions& options);
void build_vit_b16(Network& net, const ModelOptions& options);

/// The decoders' shapes (DecoderShape): GPT-2 small's defaults, an MLP of 4·hidden unless given,
/// no grouped-query attention; LLaMA's (zoo/llama.cpp).
TransformerShape gpt_shape(const TransformerOptions& options);
TransformerShape llama_shape(const TransformerOptions& options);
/// LLaMA's SwiGLU width for `hidden` (Meta's ModelArgs): 2/3 of 4·hidden, rounded up to a
/// multiple of 256 — 11008 for LLaMA-2-7B's 4096.
std::int64_t llama_intermediate(std::int64_t hidden);

/// How the deep residual family spends `depth` weighted layers (see resnet.cpp); throws
/// InputError for a depth the family cannot have.
struct ResidualLayout {
  bool bottleneck = true;
  std::vector<std::int64_t> blocks;  // per stage
};
ResidualLayout residual_layout(std::int64_t depth);

}  // namespace memplan::zoo
