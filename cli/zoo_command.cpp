#include <fmt/core.h>

#include "cli/commands.hpp"
#include "sim/input_error.hpp"
#include "sim/trace_io.hpp"
#include "zoo/network.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {
namespace {

// "224x224" or "16x112x112" → extents. Throws InputError naming --input.
std::vector<std::int64_t> parse_extents(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = text.find('x', start);
    const std::string part =
        text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size()) {
      throw sim::InputError("--input", fmt::format("'{}' is not HxW or TxHxW", text));
    }
    out.push_back(value);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return out;
}

}  // namespace

void add_zoo_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string device;
    std::int64_t batch = 0;
    std::string input;
    std::int64_t depth = 0;
    std::string output;
    bool list = false;
    bool caffe = false;
    zoo::TransformerOptions transformer;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "zoo", "Write the modeled training step of a known network on a known GPU");
  cmd->add_option("MODEL", options->model, "model name (see --list)");
  cmd->add_flag("--list", options->list, "list models and devices, one line each");
  cmd->add_option("--batch", options->batch, "batch size");
  cmd->add_option("--device", options->device, "device preset (see --list)");
  cmd->add_option("--input", options->input, "input extents, HxW (images) or TxHxW (clips)");
  cmd->add_option("--depth", options->depth, "depth of the deep residual family ('resnet')");
  cmd->add_option("--layers", options->transformer.layers, "transformer layers (gpt)");
  cmd->add_option("--hidden", options->transformer.hidden, "transformer hidden size (gpt)");
  cmd->add_option("--heads", options->transformer.heads, "attention heads (gpt)");
  cmd->add_option("--seq", options->transformer.sequence, "sequence length (gpt)");
  cmd->add_option("--vocab", options->transformer.vocab, "vocabulary size (gpt)");
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
    request.options.batch = options->batch;
    if (!options->input.empty()) request.options.input = parse_extents(options->input);
    if (cmd->count("--depth") != 0) request.options.depth = options->depth;
    request.options.transformer = options->transformer;
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
