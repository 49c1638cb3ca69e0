#pragma once
// The model registry: every network the zoo can build, with its default input and whether it
// takes --depth, and build_model() that turns a name and options into a workload without costs.
// One file per family (alexnet.cpp, resnet.cpp, ...) implements the builders declared here.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/workload.hpp"
#include "zoo/network.hpp"

namespace memplan::zoo {

/// A GPT-style decoder: the defaults are GPT-2 small (124.4M parameters).
struct TransformerOptions {
  std::int64_t layers = 12;
  std::int64_t hidden = 768;
  std::int64_t heads = 12;
  std::int64_t sequence = 1024;
  std::int64_t vocab = 50257;
};

struct ModelOptions {
  std::int64_t batch = 1;
  Shape input;                        // spatial extents (HxW or TxHxW); empty = the model's default
  std::optional<std::int64_t> depth;  // deep residual family only
  TransformerOptions transformer;
  Optimizer optimizer = Optimizer::kSgd;  // the update op and the state per parameter
};

using ModelBuilder = void (*)(Network&, const ModelOptions&);

struct ModelInfo {
  std::string_view name;
  std::string_view summary;
  int input_dims = 2;  // 2: HxW image, 3: TxHxW clip, 0: token sequence (transformer options)
  Shape default_input;
  bool takes_depth = false;
  ModelBuilder build = nullptr;
  /// Another name find_model() accepts (the and the papers' name), or empty.
  std::string_view alias;
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

/// How the deep residual family spends `depth` weighted layers (see resnet.cpp); throws
/// InputError for a depth the family cannot have.
struct ResidualLayout {
  bool bottleneck = true;
  std::vector<std::int64_t> blocks;  // per stage
};
ResidualLayout residual_layout(std::int64_t depth);

}  // namespace memplan::zoo
