// `memplan record`: build a zoo model, run its in-core step on a backend (warm-up iterations, then
// one recorded iteration) and write the trace with the measured op durations and copy link
// (provenance: recorded, BACKEND). The trace's device memory is the backend device's (--memory
// overrides it), not the in-core peak, so that a plan is checked against what the device has. A
// model or layer the backend cannot run is bad input (exit 2).
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include "cli/backends.hpp"
#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/model_flags.hpp"
#include "cli/progress.hpp"
#include "core/input_error.hpp"
#include "core/units.hpp"
#include "io/output_file.hpp"
#include "io/trace_io.hpp"
#include "runtime/recording.hpp"
#include "zoo/models.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {
namespace {

struct RecordOptions {
  std::string model;
  std::string backend = "host";
  ModelFlags shape;
  std::uint64_t seed = 1;
  int warmup = 2;
  int iterations = 1;
  std::string memory;
  std::string output;
  bool json = false;
  bool quiet = false;
};

void record(const RecordOptions& o, const CLI::App& cmd) {
  sim::check_output(o.output, "-o");
  std::FILE* report = sim::report_stream({o.output});
  const std::unique_ptr<runtime::Backend> backend = make_backend(o.backend);
  const zoo::ModelInfo* model = zoo::find_model(o.model);
  if (model == nullptr) {
    throw sim::InputError(
        "MODEL", fmt::format("unknown model '{}' (models: {})", o.model, zoo::model_names()));
  }
  const zoo::ModelOptions options = model_options_from_flags(cmd, o.shape, *model);
  zoo::BuiltModel built = zoo::build_model(*model, options);
  const zoo::Shape& in = options.input.empty() ? model->default_input : options.input;
  std::string dims;
  for (std::size_t i = 0; i < in.size(); ++i) dims += (i > 0 ? "x" : "") + std::to_string(in[i]);
  if (model->input_dims == 0) {
    dims = fmt::format("sequence {}", model->decoder_shape(options.transformer).sequence);
  }
  built.workload.provenance.note =
      fmt::format("{} input {}, batch {}, {} trainable parameters, fp32, SGD with momentum",
                  model->name, dims, o.shape.batch, built.parameter_count);
  runtime::RecordOptions ro;
  ro.seed = o.seed;
  ro.warmup = o.warmup;
  ro.iterations = o.iterations;
  runtime::Recording r;
  Progress progress("record", Progress::mode_for(o.quiet, o.json));
  progress.stage(
      fmt::format("running {} ({} ops) on the {} backend: {} warm-up + {} recorded "
                  "iterations",
                  model->name, built.workload.ops.size(), backend->name(), o.warmup, o.iterations));
  try {  // a runtime::BackendError goes on to main (exit 1)
    r = runtime::record(*backend, built.workload, ro);
  } catch (const sim::InputError& e) {  // a layer the backend has no kernel for, or no memory
    const std::string where = "--backend " + backend->name();
    throw sim::InputError(where, fmt::format("cannot run {}: {}", model->name,
                                             e.where() == where ? e.problem() : e.what()));
  }
  progress.finish();
  r.workload.device.memory_bytes = o.memory.empty() ? device_memory_bytes(backend->name())
                                                    : sim::parse_bytes(o.memory, "--memory");
  sim::write_output(o.output, sim::write_trace(r.workload));
  if (o.json) {
    const nlohmann::json j = {
        {"model", model->name},
        {"backend", backend->name()},
        {"ops", r.workload.ops.size()},
        {"iteration_s", sim::to_seconds(r.iteration_ns)},
        {"peak_reserved_bytes_incore", r.peak_reserved_bytes},
        {"memory_bytes", r.workload.device.memory_bytes},
        {"h2d_bytes_per_s", r.link.h2d_bytes_per_s},
        {"d2h_bytes_per_s", r.link.d2h_bytes_per_s},
        {"copy_latency_ns", r.link.latency_ns},
        {"host_bytes_per_s", r.workload.device.host_bandwidth_bytes_per_s.value()},
        {"output", o.output}};
    fmt::print(report, "{}\n", j.dump(2));
    return;
  }
  fmt::print(report,
             "recorded {} on {}: {} ops, iteration {:.3f} ms, in-core device memory {} (device "
             "memory {}), link {:.2f} GB/s h2d / {:.2f} GB/s d2h -> {}\n",
             model->name, backend->name(), r.workload.ops.size(),
             static_cast<double>(r.iteration_ns) * 1e-6, sim::format_bytes(r.peak_reserved_bytes),
             sim::format_bytes(r.workload.device.memory_bytes), r.link.h2d_bytes_per_s * 1e-9,
             r.link.d2h_bytes_per_s * 1e-9, o.output);
}

}  // namespace

void add_record_command(CLI::App& app) {
  auto options = std::make_shared<RecordOptions>();
  auto* cmd = app.add_subcommand(
      "record", "Run a zoo model's training step on a backend and write the measured trace");
  cmd->add_option("MODEL", options->model, "zoo model name (see memplan zoo --list)")->required();
  cmd->add_option("--backend", options->backend, "where to run, one of: host, cuda (a GPU)");
  add_model_flags(*cmd, options->shape);
  cmd->get_option("--batch")->required();
  cmd->add_option("--seed", options->seed, "seed of the input data and weights")
      ->check(integer_in(0, kMaxSeed));
  cmd->add_option("--warmup", options->warmup, "iterations run before the recorded one (2)")
      ->check(integer_in(0, 1000));
  cmd->add_option("--iterations", options->iterations,
                  "recorded iterations; op times are their medians (1)")
      ->check(integer_in(1, 1000));
  cmd->add_option("--memory", options->memory,
                  "device memory the trace records (default: the backend device's: the GPU's, or "
                  "the host's physical memory)")
      ->check(size_value());
  cmd->add_option("-o,--output", options->output,
                  "trace file to write (traces/FORMAT.md; - for standard output)")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object");
  add_quiet_flag(*cmd, options->quiet);
  cmd->callback([options, cmd] { record(*options, *cmd); });
}

}  // namespace memplan::cli
