#include "zoo/models.hpp"

#include <fmt/core.h>

#include "core/input_error.hpp"

namespace memplan::zoo {

// A table, one entry per model: longer than a function should be, and clearer whole.
// NOLINTNEXTLINE(readability-function-size)
const std::vector<ModelInfo>& models() {
  static const std::vector<ModelInfo> kModels{
      {"alexnet",
       "AlexNet (torchvision), 61.1M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_alexnet,
       {}},
      {"overfeat",
       "OverFeat fast model (Sermanet 2014), 145.9M parameters, 231x231",
       2,
       {231, 231},
       false,
       build_overfeat,
       {}},
      {"vgg16",
       "VGG-16 (torchvision), 138.4M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_vgg16,
       {}},
      {"googlenet",
       "GoogLeNet (torchvision, no aux classifiers), 6.6M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_googlenet,
       {}},
      {"resnet18",
       "ResNet-18 (torchvision), 11.7M parameters, 224x224",
       2,
       {224, 224},
       false,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, 18); },
       {}},
      {"resnet34",
       "ResNet-34 (torchvision), 21.8M parameters, 224x224",
       2,
       {224, 224},
       false,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, 34); },
       {}},
      {"resnet50",
       "ResNet-50 (torchvision), 25.6M parameters, 224x224",
       2,
       {224, 224},
       false,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, 50); },
       {}},
      {"resnet101",
       "ResNet-101 (torchvision), 44.5M parameters, 224x224",
       2,
       {224, 224},
       false,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, 101); },
       {}},
      {"resnet152",
       "ResNet-152 (torchvision), 60.2M parameters, 224x224",
       2,
       {224, 224},
       false,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, 152); },
       {}},
      {"resnet",
       "deep residual family, --depth D (e.g. 1517 Layrub, 2500 SuperNeurons), 224x224",
       2,
       {224, 224},
       true,
       [](Network& n, const ModelOptions& o) { build_resnet(n, o, o.depth.value()); },
       {}},
      {"resnext101-3d",
       "ResNeXt-101 32x 3D (Hara 2018), 16x112x112 clips, 400 classes",
       3,
       {16, 112, 112},
       false,
       build_resnext3d,
       "resnext101"},
      {"densenet121",
       "DenseNet-121 (torchvision), 8.0M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_densenet121,
       {}},
      {"mobilenet_v2",
       "MobileNetV2 (torchvision), 3.5M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_mobilenet_v2,
       {}},
      {"gpt",
       "GPT-style decoder (default GPT-2 small: --layers 12 --hidden 768 --heads 12 --seq 1024 "
       "--vocab 50257)",
       0,
       {},
       false,
       build_transformer,
       {}},
  };
  return kModels;
}

const ModelInfo* find_model(std::string_view name) {
  for (const ModelInfo& m : models()) {
    if (m.name == name || (!m.alias.empty() && m.alias == name)) return &m;
  }
  return nullptr;
}

BuiltModel build_model(const ModelInfo& model, const ModelOptions& options) {
  ModelOptions o = options;
  if (o.batch <= 0)
    throw sim::InputError("--batch", fmt::format("batch {} (must be at least 1)", o.batch));
  if (model.input_dims == 0) {
    if (!o.input.empty()) {
      throw sim::InputError("--input",
                            fmt::format("{} takes --seq, not an image size", model.name));
    }
    const TransformerOptions& t = o.transformer;
    const std::pair<const char*, std::int64_t> fields[] = {{"--layers", t.layers},
                                                           {"--hidden", t.hidden},
                                                           {"--heads", t.heads},
                                                           {"--seq", t.sequence},
                                                           {"--vocab", t.vocab}};
    for (const auto& [flag, value] : fields) {
      if (value <= 0) throw sim::InputError(flag, fmt::format("{} (must be at least 1)", value));
    }
    if (t.hidden % t.heads != 0) {
      throw sim::InputError(
          "--heads", fmt::format("{} heads do not divide hidden size {}", t.heads, t.hidden));
    }
  } else {
    if (o.input.empty()) o.input = model.default_input;
    if (static_cast<int>(o.input.size()) != model.input_dims) {
      throw sim::InputError(
          "--input", fmt::format("{} takes {} input ({} extents), got {}", model.name,
                                 model.input_dims == 3 ? "a TxHxW" : "an HxW", model.input_dims,
                                 o.input.size()));
    }
    for (std::int64_t e : o.input) {
      if (e <= 0)
        throw sim::InputError("--input", fmt::format("extent {} (must be at least 1)", e));
    }
  }
  if (model.takes_depth && !o.depth) {
    throw sim::InputError("--depth", fmt::format("{} needs --depth", model.name));
  }
  if (!model.takes_depth && o.depth) {
    throw sim::InputError(
        "--depth",
        fmt::format("{} has a fixed depth; use the 'resnet' family for --depth", model.name));
  }
  if (o.depth) residual_layout(*o.depth);  // rejects impossible depths before building anything
  Network net(std::string(model.name), o.batch, o.optimizer);
  model.build(net, o);
  BuiltModel built;
  built.parameter_count = net.parameter_count();
  built.workload = net.finish();
  return built;
}

}  // namespace memplan::zoo
