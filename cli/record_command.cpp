// `memplan record`: build a zoo model, run its in-core step on a backend (warm-up iterations, then
// one recorded iteration) and write the trace with the measured op durations and copy link
// (provenance: recorded, BACKEND). A model or layer the backend cannot run is bad input (exit 2).
#include <stdexcept>

#include <fmt/core.h>

#include "cli/backends.hpp"
#include "cli/commands.hpp"
#include "runtime/recording.hpp"
#include "sim/input_error.hpp"
#include "sim/trace_io.hpp"
#include "sim/units.hpp"
#include "zoo/models.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {
namespace {

struct RecordOptions {
  std::string model;
  std::string backend = "host";
  std::int64_t batch = 0;
  std::string input;
  std::int64_t depth = 0;
  std::uint64_t seed = 1;
  int warmup = 2;
  int iterations = 1;
  std::string output;
  zoo::TransformerOptions transformer;
};

// "32x32" or "8x32x32" → extents. Throws InputError naming --input.
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

void record(const RecordOptions& o, bool has_depth) {
  const std::unique_ptr<runtime::Backend> backend = make_backend(o.backend);
  const zoo::ModelInfo* model = zoo::find_model(o.model);
  if (model == nullptr) {
    throw sim::InputError(
        "MODEL", fmt::format("unknown model '{}' (models: {})", o.model, zoo::model_names()));
  }
  if (o.warmup < 0) throw sim::InputError("--warmup", fmt::format("{} (must be >= 0)", o.warmup));
  if (o.iterations < 1) {
    throw sim::InputError("--iterations", fmt::format("{} (must be >= 1)", o.iterations));
  }
  zoo::ModelOptions options;
  options.batch = o.batch;
  if (!o.input.empty()) options.input = parse_extents(o.input);
  if (has_depth) options.depth = o.depth;
  options.transformer = o.transformer;
  zoo::BuiltModel built = zoo::build_model(*model, options);
  const zoo::Shape& in = options.input.empty() ? model->default_input : options.input;
  std::string dims;
  for (std::size_t i = 0; i < in.size(); ++i) dims += (i > 0 ? "x" : "") + std::to_string(in[i]);
  if (model->input_dims == 0) dims = fmt::format("sequence {}", o.transformer.sequence);
  built.workload.provenance.note =
      fmt::format("{} input {}, batch {}, {} trainable parameters, fp32, SGD with momentum",
                  model->name, dims, o.batch, built.parameter_count);
  runtime::RecordOptions ro;
  ro.seed = o.seed;
  ro.warmup = o.warmup;
  ro.iterations = o.iterations;
  runtime::Recording r;
  try {
    r = runtime::record(*backend, built.workload, ro);
  } catch (const std::runtime_error& e) {
    throw sim::InputError("--backend " + backend->name(),
                          fmt::format("cannot run {}: {}", model->name, e.what()));
  }
  sim::write_trace_file(r.workload, o.output);
  fmt::print("recorded {} on {}: {} ops, iteration {:.3f} ms, in-core device memory {}, link "
             "{:.2f} GB/s h2d / {:.2f} GB/s d2h -> {}\n",
             model->name, backend->name(), r.workload.ops.size(),
             static_cast<double>(r.iteration_ns) * 1e-6, sim::format_bytes(r.peak_reserved_bytes),
             r.link.h2d_bytes_per_s * 1e-9, r.link.d2h_bytes_per_s * 1e-9, o.output);
}

}  // namespace

void add_record_command(CLI::App& app) {
  auto options = std::make_shared<RecordOptions>();
  auto* cmd = app.add_subcommand(
      "record", "Run a zoo model's training step on a backend and write the measured trace");
  cmd->add_option("MODEL", options->model, "zoo model name (see memplan zoo --list)")->required();
  cmd->add_option("--backend", options->backend, "where to run: host, cuda (a GPU)");
  cmd->add_option("--batch", options->batch, "batch size")->required();
  cmd->add_option("--input", options->input, "input extents, HxW (images) or TxHxW (clips)");
  cmd->add_option("--depth", options->depth, "depth of the deep residual family ('resnet')");
  cmd->add_option("--layers", options->transformer.layers, "transformer layers (gpt)");
  cmd->add_option("--hidden", options->transformer.hidden, "transformer hidden size (gpt)");
  cmd->add_option("--heads", options->transformer.heads, "attention heads (gpt)");
  cmd->add_option("--seq", options->transformer.sequence, "sequence length (gpt)");
  cmd->add_option("--vocab", options->transformer.vocab, "vocabulary size (gpt)");
  cmd->add_option("--seed", options->seed, "seed of the input data and weights");
  cmd->add_option("--warmup", options->warmup, "iterations run before the recorded one (2)");
  cmd->add_option("--iterations", options->iterations,
                  "recorded iterations; op times are their medians (1)");
  cmd->add_option("-o,--output", options->output, "trace file to write (format v1)")->required();
  cmd->callback([options, cmd] { record(*options, cmd->count("--depth") != 0); });
}

}  // namespace memplan::cli
