#include "zoo/zoo.hpp"

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/cost_model.hpp"
#include "zoo/devices.hpp"

namespace memplan::zoo {
namespace {

// The precision as the provenance note says it (Note [Training precision]).
std::string_view precision_note(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32 (float32 tensors, TF32 tensor-core matmuls and convolutions)";
    case Precision::kBf16:
      return "bf16 autocast (float32 parameters, gradients and optimizer state)";
    case Precision::kFp16:
      return "fp16 autocast with a GradScaler (float32 parameters, gradients and optimizer state)";
  }
  return "fp32";
}

}  // namespace

std::string model_names() {
  std::string out;
  for (const ModelInfo& m : models()) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", m.name);
    if (!m.alias.empty()) out += fmt::format(" (or {})", m.alias);
  }
  return out;
}

std::string device_names() {
  std::string out;
  for (const Device& d : devices()) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

Optimizer optimizer_named(const std::string& name) {
  if (name == "sgd") return Optimizer::kSgd;
  if (name == "adam") return Optimizer::kAdam;
  throw sim::InputError("--optimizer",
                        fmt::format("unknown optimizer '{}' (optimizers: sgd, adam)", name));
}

Precision precision_named(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (name == precision_name(p)) return p;
  }
  throw sim::InputError("--precision", fmt::format("unknown precision '{}' (precisions: fp32, "
                                                   "tf32, bf16, fp16)",
                                                   name));
}

AttentionKernel attention_named(const std::string& name) {
  for (AttentionKernel k : {AttentionKernel::kEager, AttentionKernel::kSdpa}) {
    if (name == attention_name(k)) return k;
  }
  throw sim::InputError("--attention",
                        fmt::format("unknown attention '{}' (attentions: eager, sdpa)", name));
}

GptActivation activation_named(const std::string& name) {
  if (name == "gelu") return GptActivation::kGelu;
  if (name == "gelu_new") return GptActivation::kGeluNew;
  throw sim::InputError("--activation",
                        fmt::format("unknown activation '{}' (activations: gelu, gelu_new)", name));
}

sim::Workload make_workload(const ZooRequest& request) {
  const ModelInfo* model = find_model(request.model);
  if (model == nullptr) {
    throw sim::InputError(
        "MODEL", fmt::format("unknown model '{}' (models: {})", request.model, model_names()));
  }
  const Device* device = find_device(request.device);
  if (device == nullptr) {
    throw sim::InputError("--device", fmt::format("unknown device '{}' (devices: {})",
                                                  request.device, device_names()));
  }
  const Precision precision = request.options.precision;
  if (matrix_flops_per_s(*device, precision) <= 0) {
    throw sim::InputError(
        "--precision", fmt::format("{} has no {} tensor cores (its precisions: {})", device->name,
                                   precision_name(precision), precision_names(*device)));
  }
  BuiltModel built = build_model(*model, request.options);
  sim::Workload& w = built.workload;
  CostModel(*device, precision, request.options.channels_last).apply(w);
  w.device = device_info(*device);
  w.provenance.source = "modeled";
  w.provenance.cost_model = std::string(CostModel::kName);
  w.provenance.device = std::string(device->name);
  std::string what = std::string(model->name);
  if (request.options.depth) what += fmt::format(" depth {}", *request.options.depth);
  if (model->input_dims == 0) {
    const TransformerShape t = model->decoder_shape(request.options.transformer);
    what += fmt::format(" layers {} hidden {} heads {} seq {} vocab {} intermediate {}", t.layers,
                        t.hidden, t.heads, t.sequence, t.vocab, t.intermediate);
    if (t.kv_heads != t.heads) what += fmt::format(" kv_heads {}", t.kv_heads);
  } else {
    const Shape& in = request.options.input.empty() ? model->default_input : request.options.input;
    std::string dims;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (i > 0) dims += 'x';
      dims += std::to_string(in[i]);
    }
    what += " input " + dims;
  }
  // The eager attention and the fused GELU were the zoo's only ones: their steps' notes stay.
  if (model->attention && attention_kernel(request.options) == AttentionKernel::kSdpa)
    what += ", fused scaled-dot-product attention (FlashAttention-2)";
  if (request.options.activation == GptActivation::kGeluNew) what += ", gelu_new (unfused)";
  if (request.options.channels_last) what += ", channels_last";
  w.provenance.note =
      fmt::format("memplan zoo: {}, batch {}, {} trainable parameters, {}, {}", what,
                  request.options.batch, built.parameter_count, precision_note(precision),
                  request.options.optimizer == Optimizer::kAdam ? "Adam" : "SGD with momentum");
  sim::validate(w, fmt::format("zoo model '{}'", model->name));
  return std::move(built.workload);
}

std::string list_text() {
  std::string out = "models:\n";
  for (const ModelInfo& m : models()) {
    out += fmt::format("  {:<16} {}", m.name, m.summary);
    if (!m.alias.empty()) out += fmt::format(" (alias: {})", m.alias);
    out += '\n';
  }
  out += "devices:\n";
  for (const Device& d : devices()) out += fmt::format("  {:<16} {}\n", d.name, d.summary);
  return out;
}

}  // namespace memplan::zoo
