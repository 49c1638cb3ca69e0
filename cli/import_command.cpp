#include <filesystem>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "importers/kineto_importer.hpp"
#include "importers/kineto_trace.hpp"
#include "importers/recorded_step.hpp"
#include "sim/input_error.hpp"
#include "sim/liveness.hpp"
#include "sim/trace_io.hpp"
#include "sim/units.hpp"

namespace memplan::cli {

void add_import_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::int64_t step = -1;
    std::string step_annotation;
    std::string window;
    bool whole = false;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("import", "Turn a profiler trace into a memplan trace");
  cmd->require_subcommand(1);
  auto* kineto = cmd->add_subcommand(
      "kineto",
      "PyTorch profiler (Kineto) Chrome trace, .json or .json.gz (docs/kineto-import.md)");
  kineto->add_option("FILE", options->file, "profiler trace")->required();
  kineto->add_option("--step", options->step,
                     "the N of ProfilerStep#N (default: the first complete step)");
  kineto->add_option("--step-annotation", options->step_annotation,
                     "the step is the first event of this name (a record_function range)");
  kineto->add_option("--window", options->window,
                     "the step is START:END from the trace's first event, e.g. 10ms:86ms");
  kineto->add_flag("--whole", options->whole, "the step is the whole trace");
  kineto->add_option("-o,--output", options->output, "memplan trace to write")->required();
  kineto->callback([options] {
    const importers::KinetoTrace trace = importers::read_kineto_trace(options->file);
    importers::ImportOptions import_options;
    if (options->step >= 0) import_options.step = options->step;
    if (!options->step_annotation.empty())
      import_options.step_annotation = options->step_annotation;
    if (!options->window.empty()) {
      const auto colon = options->window.find(':');
      if (colon == std::string::npos)
        throw sim::InputError("--window", "expected START:END, e.g. 10ms:86ms");
      import_options.window = {sim::parse_duration(options->window.substr(0, colon), "--window"),
                               sim::parse_duration(options->window.substr(colon + 1), "--window")};
    }
    import_options.whole_trace = options->whole;
    const importers::ImportResult result = importers::import_kineto(
        trace, import_options, std::filesystem::path(options->file).filename().string());
    sim::write_trace_file(result.workload, options->output);

    const auto& r = result.report;
    const auto recorded = importers::measure_recorded_step(trace, r.step, r.gpu);
    const auto peak = sim::incore_peak(result.workload);
    sim::Bytes preexisting = 0;
    for (const auto& t : result.workload.tensors) {
      if (sim::is_persistent(t.kind)) preexisting += t.bytes;
    }
    fmt::print("imported {}{} from {}: {} forward, {} backward, {} update ops, {} tensors\n",
               r.step.label, r.step_was_chosen ? " (the first complete step)" : "", options->file,
               r.forward_ops, r.backward_ops, r.update_ops, result.workload.tensors.size());
    fmt::print(
        "folded into the previous op: {} non-layer events, {} of them backward nodes without a "
        "forward layer op\n",
        r.folded_events, r.unmatched_backward);
    fmt::print("{} time: in-core replay {:.3f} ms, recorded busy {:.3f} ms\n",
               r.gpu ? "device" : "CPU", static_cast<double>(r.op_time_ns) / 1e6,
               static_cast<double>(recorded.device_busy_ns) / 1e6);
    if (recorded.peak_total_allocated_bytes) {
      fmt::print("peak: in-core {:.1f} MiB, recorded Total Allocated {:.1f} MiB\n",
                 static_cast<double>(peak.bytes) / (1 << 20),
                 static_cast<double>(*recorded.peak_total_allocated_bytes) / (1 << 20));
    } else {
      fmt::print(
          "peak: in-core {:.1f} MiB, recorded {:.1f} MiB above the step's start + {:.1f} MiB of "
          "parameters and optimizer state from the model's shapes = {:.1f} MiB\n",
          static_cast<double>(peak.bytes) / (1 << 20),
          static_cast<double>(recorded.peak_above_start_bytes) / (1 << 20),
          static_cast<double>(preexisting) / (1 << 20),
          static_cast<double>(recorded.peak_above_start_bytes + preexisting) / (1 << 20));
    }
    fmt::print("trainable parameters: {} tensors, {} from the ops that read them",
               r.trainable_parameters, sim::format_bytes(r.trainable_parameter_bytes));
    if (r.optimizer_shape_tensors) {
      fmt::print("; the optimizer's ops record {} tensors, {}{}\n", *r.optimizer_shape_tensors,
                 sim::format_bytes(r.optimizer_shape_bytes),
                 r.optimizer_shape_bytes == r.trainable_parameter_bytes ? " (equal)" : " (differ)");
    } else {
      fmt::print(" (the optimizer's ops record no tensor lists to check them against)\n");
    }
    if (r.time_only) {
      fmt::print(
          "no recorded shapes: imported the time side alone (in-core replay and link what-ifs "
          "work; compare, search, sweep and validate refuse); record with "
          "torch.profiler.profile(record_shapes=True) for sizes\n");
    }
    if (r.host_ops > 0) {
      fmt::print(
          "host side: {} ops with their dispatch time, {} blocking calls ({:.3f} ms waiting), "
          "launch {} ns, {} streams; {} copies in the step ({} pageable, H2D {}, D2H {})\n",
          r.host_ops, r.blocking_calls, static_cast<double>(r.blocked_ns) / 1e6,
          result.workload.launch_ns.value_or(0), r.streams, r.copies, r.pageable_copies,
          sim::format_bytes(r.h2d_bytes), sim::format_bytes(r.d2h_bytes));
    }
    fmt::print("recorded step wall {:.3f} ms, its device work ends at {:.3f} ms\n",
               static_cast<double>(r.step.end_ns - r.step.start_ns) / 1e6,
               static_cast<double>(recorded.span_ns) / 1e6);
    fmt::print("wrote {}\n", options->output);
  });
}

}  // namespace memplan::cli
