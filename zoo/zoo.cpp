#include "zoo/zoo.hpp"

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/cost_model.hpp"
#include "zoo/devices.hpp"

namespace memplan::zoo {

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
  BuiltModel built = build_model(*model, request.options);
  sim::Workload& w = built.workload;
  CostModel(*device).apply(w);
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
  w.provenance.note =
      fmt::format("memplan zoo: {}, batch {}, {} trainable parameters, fp32, {}", what,
                  request.options.batch, built.parameter_count,
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
