// `memplan validate`: run a plan for real on a backend (host, or cuda on a GPU machine) and
// the in-core reference on the same data and weights, and print predicted vs measured peak device
// bytes and iteration time and whether the gradients match (bitwise, or within the stated
// tolerance for a plan that narrows maps: Note [Validation tolerance] in runtime/validation.hpp).
// Exit 0 when the run fits, its peak is the predicted one and the results match; 1 otherwise
// (including a plan the simulator says does not fit, which is not run unless --force: the same
// exit status as `simulate`), with one line per failure on stderr; 2 for bad input (including a
// trace with a layer the backend cannot run, and a flag the chosen backend has no use for).
// `--backend torch` runs a captured PyTorch model through python3 -m memplan.torch (below).
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli/backends.hpp"
#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/input_limit_flags.hpp"
#include "cli/machine_flags.hpp"
#include "cli/plan_flags.hpp"
#include "cli/progress.hpp"
#include "cli/python_runner.hpp"
#include "core/input_error.hpp"
#include "host_backend/host_backend.hpp"
#include "io/memory_snapshot_export.hpp"
#include "io/output_file.hpp"
#include "io/plan_io.hpp"
#include "io/timeline_export.hpp"
#include "io/trace_io.hpp"
#include "runtime/validation.hpp"
#include "sim/simulation.hpp"

namespace memplan::cli {

namespace {
struct ValidateOptions {
  std::string trace;
  PlanFlags plan;
  std::string backend = "host";
  MachineFlags machine;
  bool json = false;
  bool force = false;
  bool calibrate = false;
  bool no_host_check = false;  // --backend cuda: skip the run on the host backend
  bool quiet = false;
  std::string snapshot_out;
  std::uint64_t seed = 1;
  bool seed_given = false;  // --backend torch: else the capture's default (memplan capture --seed)
  // --backend torch: the captured model, rebuilt as `memplan capture` built it, and its step.
  std::string model, input = "224x224", optimizer = "sgd", step, compile;
  int batch = 32;
};

// --backend torch: python3 -m memplan.torch validate (python/memplan/torch/validate.py), which
// asks the simulator in process (memplan._core). What each flag does there:
//   --plan, --policy, --encode          the plan, as for the other backends;
//   --memory, --link, --h2d, --d2h,     the machine the plan is predicted on (and --policy plans
//   --latency, --host-memory,           for): passed on as `memplan simulate` takes them
//   --host-bandwidth, --allocator,      (--host-bandwidth prices an update the plan runs on the
//   --alloc-conf                        host, which PyTorch then runs on CPU copies);
//   --force                             runs a plan the simulator says does not fit;
//   --model, --batch, --input,          rebuild the captured model, batch and optimizer;
//   --optimizer, --seed                 (the capture's seed unless --seed is given)
//   --step                              the captured step, when it was the user's own;
//   --compile                           the capture's torch.compile backend;
//   --json, --quiet                     the report's form; the torch run shows no progress.
// Refused (one line, exit 2): --calibrate, which would change nothing.
void refuse_flags_torch_ignores(const ValidateOptions& o) {
  if (!o.snapshot_out.empty()) {
    throw sim::InputError("--snapshot-out",
                          "writes the device allocator's events of a host or CUDA backend run; "
                          "--backend torch measures the tensors saved for backward (record the "
                          "PyTorch run's own snapshot with "
                          "torch.cuda.memory._record_memory_history)");
  }
  if (o.calibrate) {
    throw sim::InputError("--calibrate",
                          "measures op and copy costs on the host or CUDA backend; --backend torch "
                          "predicts with the op times the capture measured in PyTorch (give the "
                          "copy link with --link, --h2d, --d2h, --latency)");
  }
  for (const auto& [flag, value] : {std::pair{"--interconnect", o.machine.interconnect},
                                    {"--network", o.machine.network},
                                    {"--gpus-per-node", o.machine.gpus_per_node}}) {
    if (!value.empty()) {
      throw sim::InputError(flag,
                            "prices the collectives of a multi-GPU step, and --backend "
                            "torch validates a step captured on one GPU");
    }
  }
}

int validate_in_torch(const ValidateOptions& o) {
  if (o.model.empty()) {
    throw sim::InputError("--backend torch", "needs --model (the MODEL given to memplan capture)");
  }
  refuse_flags_torch_ignores(o);
  std::vector<std::string> args{
      "validate", o.trace, "--model",     o.model,    "--batch", std::to_string(o.batch),
      "--input",  o.input, "--optimizer", o.optimizer};
  // The weights and the batch the capture made: its seed unless another is asked for (the host
  // backend's default, 1, would rebuild another model and batch than capture's, 0, and a step
  // whose path depends on the data would leave the captured one).
  if (o.seed_given) args.insert(args.end(), {"--seed", std::to_string(o.seed)});
  const MachineFlags& m = o.machine;
  for (const auto& [flag, value] : {std::pair{"--plan", o.plan.plan},
                                    {"--policy", o.plan.policy},
                                    {"--encode", o.plan.encode},
                                    {"--memory", m.memory},
                                    {"--link", m.link},
                                    {"--h2d", m.h2d},
                                    {"--d2h", m.d2h},
                                    {"--latency", m.latency},
                                    {"--host-memory", m.host_memory},
                                    {"--host-bandwidth", m.host_bandwidth},
                                    {"--allocator", m.allocator},
                                    {"--alloc-conf", m.alloc_conf}}) {
    if (!value.empty()) args.insert(args.end(), {flag, value});
  }
  if (!o.step.empty()) args.insert(args.end(), {"--step", o.step});
  if (!o.compile.empty()) args.insert(args.end(), {"--compile", o.compile});
  if (o.force) args.emplace_back("--force");
  if (o.json) args.emplace_back("--json");
  return run_memplan_torch("validate", args);
}

// The flags that rebuild a captured PyTorch model mean nothing to the other backends: refused.
void refuse_torch_flags(const CLI::App& cmd, const std::string& backend) {
  for (const char* flag : {"--model", "--batch", "--input", "--optimizer", "--step", "--compile"}) {
    if (cmd.count(flag) > 0) {
      throw sim::InputError(flag, fmt::format("rebuilds the captured PyTorch model: only for "
                                              "--backend torch, not --backend {}",
                                              backend));
    }
  }
}

// What a run for real measured: the report against the prediction and, for the CUDA backend, the
// gradients against the host backend's (close, not bitwise: see docs/gpu-validation.md).
struct Measured {
  runtime::ValidationReport report;
  std::optional<runtime::BackendComparison> host;
};

Measured run_for_real(const runtime::Backend& backend, const sim::Workload& workload,
                      const sim::Plan& plan, const sim::Simulation& predicted,
                      const sim::Machine& machine, const ValidateOptions& o) {
  Progress progress("validate", Progress::mode_for(o.quiet, o.json));
  progress.stage(
      fmt::format("running the plan and the in-core reference on the {} backend ({} ops)",
                  backend.name(), workload.ops.size()));
  runtime::ValidationOptions options;
  options.seed = o.seed;
  options.calibrate = o.calibrate;
  Measured m;
  try {  // a runtime::BackendError goes on to main (exit 1)
    m.report = runtime::validate(backend, workload, plan, predicted, machine, options);
  } catch (const sim::InputError& e) {  // a layer the backend has no kernel for
    throw sim::InputError("--backend " + backend.name(), e.what());
  }
  progress.finish();
  if (backend.name() == "cuda" && m.report.measured_feasible && !o.no_host_check) {
    m.host = runtime::compare_backends(backend, host_backend::HostBackend(), workload, plan,
                                       machine, o.seed);
  }
  return m;
}

nlohmann::json tolerance_json(const runtime::Tolerance& tolerance) {
  if (tolerance.bitwise) return nullptr;
  return {{"test",
           "per group (gradients with optimizer state; parameters; loss): "
           "L2(plan - in-core) <= relative * L2(in-core)"},
          {"relative", tolerance.relative},
          {"narrowed_maps", tolerance.narrowed_maps},
          {"unit_roundoff", tolerance.unit_roundoff},
          {"factor", runtime::kToleranceFactor},
          {"cap", runtime::kMaxRelativeTolerance}};
}

void print_json(const ValidateOptions& o, const sim::Plan& plan, const Measured& m) {
  const runtime::ValidationReport& r = m.report;
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json j;
  j["backend"] = o.backend;
  j["policy"] = plan.policy;
  j["fits"] = r.measured_feasible;
  j["peak_bytes_predicted"] = r.peak_bytes_predicted;
  j["peak_bytes_measured"] = r.peak_bytes_measured;
  j["peak_reserved_bytes_predicted"] = r.peak_reserved_predicted;
  j["peak_reserved_bytes_measured"] = r.peak_reserved_measured;
  j["iteration_s_predicted"] = static_cast<double>(r.iteration_ns_predicted) * 1e-9;
  j["iteration_s_measured"] = static_cast<double>(r.iteration_ns_measured) * 1e-9;
  j["iteration_error_percent"] = r.iteration_error_percent();
  j["peaks_match"] = r.peaks_match();
  j["gradients_match"] = r.gradients_match;
  j["bitwise_equal"] = r.bitwise_equal;
  j["comparison"] = r.tolerance.bitwise ? "bitwise" : "tolerance";
  j["tolerance"] = tolerance_json(r.tolerance);
  j["max_abs_diff"] = finite(r.max_abs_diff);
  j["max_rel_diff"] = finite(r.max_rel_diff);
  j["max_tensor_rel_diff"] = finite(r.max_tensor_rel_diff);
  j["tensors_compared"] = r.tensors_compared;
  j["worst_tensor"] = r.worst_tensor;
  j["worst_difference"] = r.worst_difference;
  j["spilled_bytes"] = r.spilled_bytes;
  j["calibrated"] = r.calibrated;
  if (m.host) {
    j["host_gradients_within_tolerance"] = m.host->within_tolerance;
    j["host_max_abs_diff"] = finite(m.host->max_abs_diff);
    j["host_max_rel_diff"] = finite(m.host->max_rel_diff);
    j["host_worst_tensor"] = m.host->worst_tensor;
    j["host_worst_difference"] = m.host->worst_difference;
    j["gradients_tolerance"] = {{"relative", m.host->tolerance.relative}};
  }
  fmt::print("{}\n", j.dump(2));
}

/// "; most in 'conv1_w_grad': relative L2 0.02" when some tensor differs, else "".
std::string worst_of(const std::string& tensor, const std::string& difference) {
  return tensor.empty() ? "" : fmt::format("; most in '{}': {}", tensor, difference);
}

void print_gradients_match(const runtime::ValidationReport& r) {
  if (r.tolerance.bitwise) {
    fmt::print("gradients match    {} ({} tensors, bitwise; max |diff| {:g}{})\n",
               r.gradients_match ? "yes" : "no", r.tensors_compared, r.max_abs_diff,
               worst_of(r.worst_tensor, r.worst_difference));
    return;
  }
  fmt::print(
      "gradients match    {} ({} tensors; tolerance: relative L2 <= {:g} = min({:g} x {} "
      "narrowed maps x 2^{}, {:g}); max relative {:g}, max |diff| {:g})\n",
      r.gradients_match ? "yes" : "no", r.tensors_compared, r.tolerance.relative,
      runtime::kToleranceFactor, r.tolerance.narrowed_maps, std::ilogb(r.tolerance.unit_roundoff),
      runtime::kMaxRelativeTolerance, r.max_rel_diff, r.max_abs_diff);
}

void print_text(const ValidateOptions& o, const std::string& backend, const sim::Plan& plan,
                const Measured& m) {
  const runtime::ValidationReport& r = m.report;
  fmt::print("backend            {}\n", backend);
  fmt::print("plan               {}\n", plan.policy.empty() ? o.plan.plan : plan.policy);
  fmt::print("peak bytes         predicted {}  measured {}\n", r.peak_bytes_predicted,
             r.peak_bytes_measured);
  fmt::print("costs              {}\n", !r.calibrated ? "the trace's"
                                        : backend == "cuda"
                                            ? "measured on this GPU (--calibrate)"
                                            : "measured on this host (--calibrate)");
  fmt::print("iteration time     predicted {:.6f} s  measured {:.6f} s  ({:+.1f}%)\n",
             static_cast<double>(r.iteration_ns_predicted) * 1e-9,
             static_cast<double>(r.iteration_ns_measured) * 1e-9, r.iteration_error_percent());
  print_gradients_match(r);
  if (r.spilled_bytes > 0) {
    fmt::print("sparse spill       {} bytes to host memory (maps denser than planned)\n",
               r.spilled_bytes);
  }
  if (m.host) {
    fmt::print(
        "vs host backend    {} (max |diff| {:g}, max relative L2 {:g}; tolerance: relative L2 "
        "<= {:g}{})\n",
        m.host->within_tolerance ? "within tolerance" : "OUT of tolerance", m.host->max_abs_diff,
        m.host->max_rel_diff, m.host->tolerance.relative,
        worst_of(m.host->worst_tensor, m.host->worst_difference));
  }
}

// 0 when the run fits and matches the prediction and the reference; 1 with a line per failure.
int exit_status_of(const Measured& m, const sim::Program& program, const sim::Workload& workload) {
  const runtime::ValidationReport& r = m.report;
  if (!r.measured_feasible) {
    if (r.oom) {
      fmt::print(stderr, "memplan: the plan ran out of device memory: {}\n",
                 sim::oom_to_text(*r.oom, program, workload));
    }
    return 1;
  }
  const std::vector<std::string> failures = runtime::validation_failures(r);
  for (const std::string& failure : failures) fmt::print(stderr, "memplan: {}\n", failure);
  if (m.host && !m.host->within_tolerance) return 1;
  return failures.empty() ? 0 : 1;
}

int validate(const ValidateOptions& o) {
  if (o.snapshot_out == "-") {  // the report goes to standard output
    throw sim::InputError("--snapshot-out", "a pickle: give a file, not standard output");
  }
  sim::check_outputs({{o.snapshot_out, "--snapshot-out"}},
                     {{o.trace, "TRACE"}, {o.plan.plan, "--plan"}});
  const std::unique_ptr<runtime::Backend> backend = make_backend(o.backend);
  const sim::Workload workload = sim::read_trace(o.trace);
  sim::require_sizes(workload, o.trace);
  const sim::Machine machine = machine_from_flags(workload, o.machine);
  runtime::require_backend_runs(machine);  // before run_for_real, which names the backend
  const sim::Plan plan = plan_from_flags(workload, machine, o.plan, "validate");
  const sim::Simulation predicted = sim::simulate_plan(workload, plan, machine);
  if (!o.force && !predicted.timeline.feasible) {
    fmt::print(stderr, "memplan: the simulator says the plan does not fit (--force runs it): {}\n",
               sim::why_not_text(predicted.timeline, predicted.program, workload));
    return 1;
  }
  const Measured m = run_for_real(*backend, workload, plan, predicted, machine, o);
  if (o.json) {
    print_json(o, plan, m);
  } else {
    print_text(o, backend->name(), plan, m);
  }
  // What the backend's allocator did, whenever the run went to the end (a peak that differs from
  // the prediction is what one opens it to see); none after an out-of-memory stop.
  if (m.report.measured_feasible && !o.snapshot_out.empty()) {
    sim::write_outputs(
        {{o.snapshot_out,
          sim::memory_snapshot_pickle(m.report.measured, predicted.program, workload, machine)}});
  }
  return exit_status_of(m, predicted.program, workload);
}
}  // namespace

void add_validate_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<ValidateOptions>();
  auto* cmd = app.add_subcommand(
      "validate", "Run a plan for real and compare it with the prediction and the in-core run");
  add_input_limit_flags(*cmd);
  cmd->add_option("TRACE", options->trace, "trace file (formats v1 to v3, see traces/FORMAT.md)")
      ->required();
  add_plan_flags(*cmd, options->plan);
  cmd->add_option("--backend", options->backend,
                  "where to run, one of: host, cuda (a GPU), torch (a captured PyTorch model: "
                  "--model)");
  cmd->add_option("--model", options->model, "--backend torch: the MODEL given to memplan capture");
  cmd->add_option("--batch", options->batch, "--backend torch: the batch size of the capture");
  cmd->add_option("--input", options->input, "--backend torch: the --input of the capture");
  cmd->add_option("--optimizer", options->optimizer, "--backend torch: sgd or adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  cmd->add_option("--step", options->step,
                  "--backend torch: the --step of the capture (package.module:function)");
  cmd->add_option("--compile", options->compile,
                  "--backend torch: the --compile of the capture (a torch.compile backend)");
  add_machine_flags(*cmd, options->machine);
  cmd->add_option("--seed", options->seed,
                  "seed of the input data and weights (default 1; --backend torch: the capture's, "
                  "0)")
      ->check(integer_in(0, kMaxSeed));
  cmd->add_flag("--force", options->force, "run even when the simulator says it does not fit");
  cmd->add_flag("--calibrate", options->calibrate,
                "predict with op and copy costs measured on the backend, not the trace's (host, "
                "cuda)");
  cmd->add_flag("--no-host-check", options->no_host_check,
                "--backend cuda: do not run the in-core step on the host backend (CPU) to compare "
                "the GPU's gradients with (it can take minutes on a large step)");
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->add_option("--snapshot-out", options->snapshot_out,
                  "write the device memory of the run the backend measured as a PyTorch memory "
                  "snapshot (host, cuda; when the run went to the end)");
  add_quiet_flag(*cmd, options->quiet);
  cmd->callback([options, cmd, &exit_status] {
    if (options->no_host_check && options->backend != "cuda") {
      throw sim::InputError("--no-host-check",
                            "skips the CUDA backend's comparison with the host backend: only for "
                            "--backend cuda, not --backend " +
                                options->backend);
    }
    if (options->backend == "torch") {
      options->seed_given = cmd->count("--seed") > 0;
      exit_status = validate_in_torch(*options);
      return;
    }
    refuse_torch_flags(*cmd, options->backend);
    exit_status = validate(*options);
  });
}

}  // namespace memplan::cli
