#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
#include "sim/input_error.hpp"
#include "sim/trace_io.hpp"
#include "zoo/network.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {
namespace {}  // namespace

void add_zoo_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string device;
    ModelFlags shape;
    std::string output;
    bool list = false;
    bool caffe = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "zoo", "Write the modeled training step of a known network on a known GPU");
  cmd->add_option("MODEL", options->model, "model name (see --list)");
  cmd->add_flag("--list", options->list, "list models and devices, one line each");
  cmd->add_option("--device", options->device, "device preset (see --list)");
  add_model_flags(*cmd, options->shape);
  cmd->add_flag("--caffe", options->caffe,
                "Caffe's memory conventions (vDNN, Layrub): ReLU backward in place, int32 "
                "max-pool masks");
  cmd->add_option("-o,--output", options->output, "trace file to write (format v1)");
  cmd->callback([options, cmd] {
    if (options->list) {
      fmt::print("{}", zoo::list_text());
      return;
    }
    if (options->model.empty()) {
      throw sim::InputError("MODEL", fmt::format("name a model (models: {})", zoo::model_names()));
    }
    if (options->device.empty()) {
      throw sim::InputError("--device",
                            fmt::format("name a device (devices: {})", zoo::device_names()));
    }
    if (cmd->count("--batch") == 0) throw sim::InputError("--batch", "give the batch size");
    if (options->output.empty()) throw sim::InputError("-o", "give the trace file to write");
    zoo::ZooRequest request;
    request.model = options->model;
    request.device = options->device;
    request.options = model_options_from_flags(*cmd, options->shape);
    sim::Workload workload = zoo::make_workload(request);
    if (options->caffe) {
      const std::size_t relus = zoo::relu_backward_in_place(workload);
      const std::size_t masks = zoo::int32_pool_indices(workload);
      workload.provenance.note += fmt::format(
          "; Caffe conventions: {} ReLU gradients in place, {} int32 max-pool masks", relus, masks);
      sim::validate(workload, fmt::format("zoo model '{}'", request.model));
    }
    sim::write_trace_file(workload, options->output);
  });
}

}  // namespace memplan::cli
