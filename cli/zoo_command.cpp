// `memplan zoo`: the modeled training step of a known network on a known GPU, written as a trace.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "io/output_file.hpp"
#include "io/trace_io.hpp"
#include "zoo/devices.hpp"
#include "zoo/models.hpp"
#include "zoo/network.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {

namespace {
struct ZooFlags {
  std::string model;
  std::string device;
  ModelFlags shape;
  std::string output;
  std::string optimizer = "sgd";
  std::string precision = "fp32";
  bool list = false;
  bool caffe = false;
  bool json = false;
};

// `memplan zoo --list`: the models and devices, one line each or one JSON object.
void print_list(bool json) {
  if (!json) {
    fmt::print("{}", zoo::list_text());
    return;
  }
  nlohmann::json j = {{"models", nlohmann::json::array()}, {"devices", nlohmann::json::array()}};
  for (const zoo::ModelInfo& m : zoo::models()) {
    j["models"].push_back({{"name", m.name}, {"summary", m.summary}});
  }
  for (const zoo::Device& d : zoo::devices()) {
    j["devices"].push_back({{"name", d.name},
                            {"summary", d.summary},
                            {"memory_bytes", d.memory_bytes},
                            {"link", d.link}});
  }
  fmt::print("{}\n", j.dump(2));
}

// The model the flags name, after checking that every flag a trace needs was given.
const zoo::ModelInfo& requested_model(const CLI::App& cmd, const ZooFlags& flags) {
  if (flags.model.empty()) {
    throw sim::InputError("MODEL", fmt::format("name a model (models: {})", zoo::model_names()));
  }
  if (flags.device.empty()) {
    throw sim::InputError("--device",
                          fmt::format("name a device (devices: {})", zoo::device_names()));
  }
  if (cmd.count("--batch") == 0) throw sim::InputError("--batch", "give the batch size");
  if (flags.output.empty()) throw sim::InputError("-o", "give the trace file to write");
  sim::check_output(flags.output, "-o");
  const zoo::ModelInfo* model = zoo::find_model(flags.model);
  if (model == nullptr) {
    throw sim::InputError(
        "MODEL", fmt::format("unknown model '{}' (models: {})", flags.model, zoo::model_names()));
  }
  return *model;
}

// Builds the model's workload, writes it as a trace and prints what was written.
void write_zoo_trace(const CLI::App& cmd, const ZooFlags& flags) {
  const zoo::ModelInfo& model = requested_model(cmd, flags);
  std::FILE* report = sim::report_stream({flags.output});
  zoo::ZooRequest request;
  request.model = flags.model;
  request.device = flags.device;
  request.options = model_options_from_flags(cmd, flags.shape, model);
  request.options.optimizer = zoo::optimizer_named(flags.optimizer);
  request.options.precision = zoo::precision_named(flags.precision);
  sim::Workload workload = zoo::make_workload(request);
  if (flags.caffe) {
    const std::size_t relus = zoo::relu_backward_in_place(workload);
    const std::size_t masks = zoo::int32_pool_indices(workload);
    workload.provenance.note += fmt::format(
        "; Caffe conventions: {} ReLU gradients in place, {} int32 max-pool masks", relus, masks);
    sim::validate(workload, fmt::format("zoo model '{}'", request.model));
  }
  sim::write_output(flags.output, sim::write_trace(workload));
  const sim::Bytes peak = sim::incore_peak(workload).bytes;
  if (flags.json) {
    const nlohmann::json j = {
        {"model", model.name},          {"device", workload.device.name},
        {"optimizer", flags.optimizer}, {"precision", flags.precision},
        {"ops", workload.ops.size()},   {"tensors", workload.tensors.size()},
        {"peak_bytes_incore", peak},    {"memory_bytes", workload.device.memory_bytes},
        {"output", flags.output}};
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "wrote {}: {} on {}, {} ops, {} tensors, in-core peak {} of {}\n",
               flags.output, model.name, workload.device.name, workload.ops.size(),
               workload.tensors.size(), sim::format_bytes(peak),
               sim::format_bytes(workload.device.memory_bytes));
  }
}
}  // namespace

void add_zoo_command(CLI::App& app) {
  auto options = std::make_shared<ZooFlags>();
  auto* cmd = app.add_subcommand(
      "zoo", "Write the modeled training step of a known network on a known GPU");
  cmd->add_option("MODEL", options->model,
                  "model name, one of: " + zoo::model_names() + " (see --list)");
  cmd->add_flag("--list", options->list, "list models and devices, one line each");
  cmd->add_option("--device", options->device,
                  "device preset, one of: " + zoo::device_names() + " (see --list)");
  add_model_flags(*cmd, options->shape);
  cmd->add_option("--optimizer", options->optimizer,
                  "sgd (momentum; one state tensor per parameter) or adam (exp_avg and "
                  "exp_avg_sq per parameter); default sgd")
      ->check(CLI::IsMember({"sgd", "adam"}));
  // Checked by the zoo (zoo::precision_named): the Python API's message is the same.
  cmd->add_option("--precision", options->precision,
                  "fp32 (the default), tf32 (float32 tensors, TF32 tensor-core matmuls and "
                  "convolutions), bf16 or fp16 (torch.autocast: low-precision activations, float32 "
                  "parameters, gradients and optimizer state; fp16 with a GradScaler)");
  cmd->add_flag("--caffe", options->caffe,
                "Caffe's memory conventions (vDNN, Layrub): ReLU backward in place, int32 "
                "max-pool masks");
  cmd->add_option("-o,--output", options->output,
                  "trace file to write (traces/FORMAT.md; - for standard output)");
  cmd->add_flag("--json", options->json,
                "print one JSON object (with --list: the models and devices)");
  cmd->callback([options, cmd] {
    if (options->list) {
      print_list(options->json);
    } else {
      write_zoo_trace(*cmd, *options);
    }
  });
}

}  // namespace memplan::cli
