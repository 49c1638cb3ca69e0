#include "zoo/models.hpp"

#include <functional>
#include <string>
#include <string_view>

#include <fmt/core.h>

#include "core/host_memory.hpp"
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
       {},
       gpt_shape,
       true},
      {"llama",
       "LLaMA decoder (HF LlamaForCausalLM; default small: --layers 4 --hidden 512 --heads 8 "
       "--seq 512 --vocab 32000; LLaMA-2-7B: --layers 32 --hidden 4096 --heads 32 --seq 4096)",
       0,
       {},
       false,
       build_llama,
       {},
       llama_shape,
       true},
      {"vit_b16",
       "ViT-B/16 (torchvision vit_b_16), 86.6M parameters, 224x224",
       2,
       {224, 224},
       false,
       build_vit_b16,
       "vit-b",
       nullptr,
       true},
  };
  return kModels;
}

const ModelInfo* find_model(std::string_view name) {
  for (const ModelInfo& m : models()) {
    if (m.name == name || (!m.alias.empty() && m.alias == name)) return &m;
  }
  return nullptr;
}

namespace {

// Note [A model larger than the machine]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Two flags grow a network without bound: --layers (a GPT, up to 2^20) and --depth (the residual
// family, up to 100,000: its third stage's blocks). A step built, checked and written holds about
// kHostBytesPerElement of memory per op and tensor (`memplan zoo resnet --depth 100000`: 700,013
// ops and 2,000,047 tensors in 1.61 GB, 596 bytes each), and the ops and tensors grow linearly
// with the layers or blocks (each adds the same forward ops, backward ops and update). So before
// building, the network is built at three and at four layers (blocks) of the same shape, its size
// at the requested count extrapolated, and a request that would need more memory than the machine
// has available (sim::available_host_memory()) is refused in one line that says what it needs,
// exit 2, instead of std::bad_alloc after 14.7 GB.
constexpr double kHostBytesPerElement = 600;

std::size_t elements_of(const ModelInfo& model, const ModelOptions& options) {
  Network net(std::string(model.name), options.batch, options.optimizer, options.precision);
  model.build(net, options);
  const sim::Workload w = net.finish();
  return w.ops.size() + w.tensors.size();
}

void refuse_larger_than_machine(const ModelInfo& model, const ModelOptions& options) {
  // The flag, the count of layers (blocks) it asks for, and the options at k of them.
  const char* flag = nullptr;
  std::int64_t count = 0;
  std::function<ModelOptions(std::int64_t)> at;
  if (model.input_dims == 0) {
    flag = "--layers";
    count = model.decoder_shape(options.transformer).layers;
    at = [&](std::int64_t k) {
      ModelOptions o = options;
      o.transformer.layers = k;
      return o;
    };
  } else if (options.depth) {
    const ResidualLayout layout = residual_layout(*options.depth);
    const bool general = layout.bottleneck ? (*options.depth - 2) / 3 - 14 == layout.blocks[2]
                                           : (*options.depth - 2) / 2 - 10 == layout.blocks[2];
    if (!general || *options.depth == 2500) return;  // the fixed layouts: small networks
    flag = "--depth";
    count = layout.blocks[2];
    at = [&options, bottleneck = layout.bottleneck](std::int64_t k) {
      ModelOptions o = options;
      o.depth = bottleneck ? 3 * (k + 14) + 2 : 2 * (k + 10) + 2;
      return o;
    };
  }
  // Three and four layers (blocks): no torchvision depth has that layout (depth 50 is not the
  // general rule's two bottleneck blocks, nor 34 its six basic ones).
  if (flag == nullptr || count <= 4) return;
  const auto three = static_cast<double>(elements_of(model, at(3)));
  const auto four = static_cast<double>(elements_of(model, at(4)));
  const double elements = three + (four - three) * static_cast<double>(count - 3);
  const double need = elements * kHostBytesPerElement;
  const sim::Bytes available = sim::available_host_memory();
  if (need <= static_cast<double>(available)) return;
  throw sim::InputError(
      flag,
      fmt::format("{} {} would be {:.1f} million ops and tensors, about {} of memory to "
                  "build; this machine has {} available",
                  model.name,
                  flag == std::string_view("--layers") ? fmt::format("of {} layers", count)
                                                       : fmt::format("of depth {}", *options.depth),
                  elements * 1e-6, sim::format_bytes(static_cast<sim::Bytes>(need)),
                  sim::format_bytes(available)));
}

}  // namespace

AttentionKernel attention_kernel(const ModelOptions& options) {
  return options.attention.value_or(default_attention(options.precision));
}

BuiltModel build_model(const ModelInfo& model, const ModelOptions& options) {
  ModelOptions o = options;
  if (o.attention && !model.attention) {
    throw sim::InputError("--attention", fmt::format("{} has no attention (--attention is for gpt, "
                                                     "llama and vit_b16)",
                                                     model.name));
  }
  if (o.activation && model.build != build_transformer) {
    throw sim::InputError("--activation", fmt::format("{} has no GELU to choose (--activation is "
                                                      "for gpt)",
                                                      model.name));
  }
  if (o.batch <= 0)
    throw sim::InputError("--batch", fmt::format("batch {} (must be at least 1)", o.batch));
  if (model.input_dims == 0) {
    if (!o.input.empty()) {
      throw sim::InputError("--input",
                            fmt::format("{} takes --seq, not an image size", model.name));
    }
    const TransformerShape t = model.decoder_shape(o.transformer);
    const std::pair<const char*, std::int64_t> fields[] = {
        {"--layers", t.layers},    {"--hidden", t.hidden}, {"--heads", t.heads},
        {"--seq", t.sequence},     {"--vocab", t.vocab},   {"--intermediate", t.intermediate},
        {"--kv-heads", t.kv_heads}};
    for (const auto& [flag, value] : fields) {
      if (value <= 0) throw sim::InputError(flag, fmt::format("{} (must be at least 1)", value));
    }
    if (t.hidden % t.heads != 0) {
      throw sim::InputError(
          "--heads", fmt::format("{} heads do not divide hidden size {}", t.heads, t.hidden));
    }
    if (t.heads % t.kv_heads != 0) {
      throw sim::InputError("--kv-heads", fmt::format("{} key/value heads do not divide {} heads",
                                                      t.kv_heads, t.heads));
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
  refuse_larger_than_machine(model, o);
  Network net(std::string(model.name), o.batch, o.optimizer, o.precision);
  model.build(net, o);
  BuiltModel built;
  built.parameter_count = net.parameter_count();
  built.workload = net.finish();
  return built;
}

}  // namespace memplan::zoo
