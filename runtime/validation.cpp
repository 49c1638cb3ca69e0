#include "runtime/validation.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "runtime/host_speed.hpp"
#include "runtime/interpreter.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::runtime {

namespace {

// The groups whose values are compared as one vector under a tolerance (Note [Validation
// tolerance]): gradients with the optimizer state that accumulates them, parameters, the loss.
std::size_t group_of(const sim::Tensor& t) {
  switch (t.kind) {
    case sim::TensorKind::kGradient:
    case sim::TensorKind::kOptimizerState:
      return 0;
    case sim::TensorKind::kParameter:
      return 1;
    default:
      return 2;
  }
}
constexpr std::size_t kGroups = 3;

}  // namespace

Tolerance tolerance_for(const sim::Plan& plan) {
  Tolerance t;
  for (const sim::Decision& d : plan.decisions) {
    if (d.action != sim::Action::kEncode) continue;
    const auto format = sim::narrow_format(d.encoding);
    if (!format) continue;
    ++t.narrowed_maps;
    t.unit_roundoff = std::max(t.unit_roundoff, std::ldexp(1.0, -(format->mantissa_bits + 1)));
  }
  if (t.narrowed_maps > 0) {
    t.bitwise = false;
    t.relative =
        std::min(kToleranceFactor * t.narrowed_maps * t.unit_roundoff, kMaxRelativeTolerance);
  }
  if (!plan.algorithms.empty()) {  // other kernels, other orders of summation
    t.bitwise = false;
    t.relative = std::max(t.relative, kCrossBackendTolerance);
  }
  return t;
}

Tolerance cross_backend_tolerance(const sim::Plan& plan) {
  Tolerance t = tolerance_for(plan);
  t.bitwise = false;
  t.relative = std::max(t.relative, kCrossBackendTolerance);
  return t;
}

bool compared_by_validation(const sim::Workload& w, const sim::Tensor& t) {
  if (t.kind == sim::TensorKind::kGradient || t.kind == sim::TensorKind::kParameter ||
      t.kind == sim::TensorKind::kOptimizerState) {
    return true;
  }
  if (t.producer == sim::kNoOp) return false;
  const sim::Op& op = w.op(t.producer);
  return op.layer.rule().loss && op.phase == sim::Phase::kForward && op.outputs.front() == t.id;
}

namespace {
/// calibrate() with the in-core Program of `workload` already lowered.
Calibration calibrate_in_core(const Backend& backend, const sim::Workload& workload,
                              const sim::Program& program, const sim::Machine& machine,
                              std::uint64_t seed, int runs) {
  Calibration c{workload, machine};
  const std::unique_ptr<Device> device =
      backend.make_device(sim::capacity_to_run(program, machine), seed, machine.allocator);
  device->set_capture(false);
  std::vector<std::vector<sim::Nanoseconds>> op_ns(workload.ops.size());
  const auto& compute = program.stream(sim::StreamId::kCompute);
  for (int k = 0; k < std::max(runs, 1) + 1; ++k) {
    const sim::Timeline measured = run_program(*device, workload, program);
    if (k == 0) continue;  // warm-up
    for (const sim::Span& span : measured.spans) {
      if (span.stream != sim::StreamId::kCompute) continue;
      const sim::Instruction& in = compute[static_cast<std::size_t>(span.index)];
      op_ns[index(in.op)].push_back(span.end_ns - span.start_ns);
    }
  }
  for (std::size_t o = 0; o < workload.ops.size(); ++o) {
    auto& times = op_ns[o];
    if (times.empty()) continue;
    std::sort(times.begin(), times.end());
    sim::Op& op = c.workload.ops[o];
    op.duration_ns = std::max<sim::Nanoseconds>(times[times.size() / 2], 1);
    for (sim::Algorithm& a : op.algorithms) a.duration_ns = op.duration_ns;
  }
  c.machine.link = backend.measure_link();
  c.machine.host_bandwidth_bytes_per_s = measure_host_op_bandwidth();
  return c;
}
}  // namespace

Calibration calibrate(const Backend& backend, const sim::Workload& workload,
                      const sim::Machine& machine, std::uint64_t seed, int runs) {
  return calibrate_in_core(backend, workload, sim::lower(workload, sim::in_core_plan(workload)),
                           machine, seed, runs);
}

double ValidationReport::iteration_error_percent() const {
  if (iteration_ns_predicted == 0) return 0;
  return 100.0 * static_cast<double>(iteration_ns_measured - iteration_ns_predicted) /
         static_cast<double>(iteration_ns_predicted);
}

namespace {

/// The plan's device: the machine's memory, or less where the simulator says the plan needs less
/// (the arena places every buffer where the simulator does, so the run is the same). A trace
/// recorded on a GPU states the whole GPU's memory, more than is ever free for one arena.
sim::Bytes plan_capacity(const sim::Program& program, const sim::Machine& machine) {
  return std::min(machine.memory_bytes, sim::capacity_to_run(program, machine));
}

// Adds the squares of the float32 values in `bytes` to `sum`, one at a time.
void add_squares(std::span<const std::byte> bytes, double& sum) {
  for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float a = 0;
    std::memcpy(&a, bytes.data() + i, 4);
    sum += static_cast<double>(a) * a;
  }
}

}  // namespace

Comparison compare_runs(const sim::Workload& workload, const Device& reference, const Device& run,
                        const Tolerance& tolerance) {
  Comparison c;
  std::array<double, kGroups> diff2{};
  std::array<double, kGroups> want2{};
  // The reference's sum of squares of each float tensor, added to its group's in the workload's
  // order; a bitwise-equal tensor's is summed only once a tensor differs (the norms are of no use
  // to an equal run, and were most of a validation's time in the sanitized build).
  struct Norm {
    const sim::Tensor* tensor;
    double want2;  // NaN: an equal tensor, summed in its group's when needed
  };
  std::vector<Norm> norms;
  for (const sim::Tensor& t : workload.tensors) {
    if (!compared_by_validation(workload, t)) continue;
    ++c.tensors_compared;
    const std::vector<std::byte> want = reference.tensor_bytes(t.id);
    const std::vector<std::byte> got = run.tensor_bytes(t.id);
    const bool is_float = t.dtype.empty() || t.dtype == "float32";
    // memcmp, not vector's ==: std::byte compares a byte at a time (the sanitized build's
    // validations spent a fifth of their time there).
    const bool equal =
        want.size() == got.size() && std::memcmp(want.data(), got.data(), want.size()) == 0;
    if (want.empty() || want.size() != got.size() || (!equal && !is_float)) {
      // Missing, or a non-float tensor that differs: no tolerance applies.
      c.match = c.bitwise_equal = false;
      c.max_abs_diff = c.max_rel_diff = c.max_tensor_rel_diff = INFINITY;
      c.worst_tensor = t.name;
      c.worst_difference = want.empty()                ? "missing in the reference run"
                           : want.size() != got.size() ? fmt::format("{} bytes, the reference's {}",
                                                                     got.size(), want.size())
                                                       : t.dtype + " values differ";
      continue;
    }
    if (equal) {
      if (is_float) norms.push_back({&t, NAN});
      continue;
    }
    c.bitwise_equal = false;
    const std::size_t g = group_of(t);
    double tensor_diff2 = 0;
    double tensor_want2 = 0;
    for (std::size_t i = 0; i + 4 <= want.size(); i += 4) {
      float a = 0;
      float b = 0;
      std::memcpy(&a, want.data() + i, 4);
      std::memcpy(&b, got.data() + i, 4);
      const double delta = static_cast<double>(b) - static_cast<double>(a);
      // NaN is not below any bound: fabs(NaN) would be lost by max.
      c.max_abs_diff = std::isnan(delta) ? INFINITY : std::max(c.max_abs_diff, std::fabs(delta));
      tensor_diff2 += std::isnan(delta) ? INFINITY : delta * delta;
      tensor_want2 += static_cast<double>(a) * a;
    }
    diff2[g] += tensor_diff2;
    norms.push_back({&t, tensor_want2});
    const double tensor_rel = tensor_want2 > 0 ? std::sqrt(tensor_diff2 / tensor_want2) : INFINITY;
    if (c.worst_tensor.empty() || tensor_rel > c.max_tensor_rel_diff) {
      c.max_tensor_rel_diff = std::max(c.max_tensor_rel_diff, tensor_rel);
      c.worst_tensor = t.name;
      c.worst_difference = fmt::format("relative L2 {:g}", tensor_rel);
    }
  }
  if (c.bitwise_equal) return c;
  for (const Norm& n : norms) {
    double& sum = want2[group_of(*n.tensor)];
    if (std::isnan(n.want2)) {
      add_squares(reference.tensor_bytes(n.tensor->id), sum);
    } else {
      sum += n.want2;
    }
  }
  for (std::size_t g = 0; g < kGroups; ++g) {
    const double diff = std::sqrt(diff2[g]);
    const double norm = std::sqrt(want2[g]);
    if (diff == 0) continue;
    c.max_rel_diff = std::max(c.max_rel_diff, norm > 0 ? diff / norm : INFINITY);
  }
  c.match = c.match && !tolerance.bitwise && c.max_rel_diff <= tolerance.relative;
  return c;
}

std::vector<std::string> validation_failures(const ValidationReport& r) {
  std::vector<std::string> failures;
  if (!r.measured_feasible) {
    failures.emplace_back("the plan ran out of device memory");
    return failures;
  }
  if (!r.peaks_match()) {
    failures.push_back(fmt::format(
        "the measured peak differs from the prediction: {} bytes live and {} reserved measured, "
        "{} and {} predicted",
        r.peak_bytes_measured, r.peak_reserved_measured, r.peak_bytes_predicted,
        r.peak_reserved_predicted));
  }
  if (!r.gradients_match) {
    failures.push_back(
        r.tolerance.bitwise
            ? fmt::format("the results differ from the in-core run's, which they must match "
                          "bitwise (max |diff| {:g})",
                          r.max_abs_diff)
            : fmt::format("the results differ from the in-core run's beyond the tolerance: "
                          "relative L2 difference {:g} > {:g} (max |diff| {:g})",
                          r.max_rel_diff, r.tolerance.relative, r.max_abs_diff));
  }
  return failures;
}

namespace {
/// The plan simulated with the costs measured on the backend: a calibrated workload has other
/// durations, so its Program is lowered anew (the only second lowering of the plan, and only with
/// --calibrate).
const sim::Timeline& calibrated_prediction(const Backend& backend, const sim::Workload& workload,
                                           const sim::Plan& plan, const sim::Program& in_core,
                                           const sim::Machine& machine, std::uint64_t seed,
                                           sim::Engine& engine) {
  const Calibration c = calibrate_in_core(backend, workload, in_core, machine, seed, 5);
  return engine.run(sim::lower(c.workload, plan), c.machine);
}
}  // namespace

ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Machine& machine,
                          const ValidationOptions& options) {
  return validate(backend, workload, plan, sim::simulate_plan(workload, plan, machine), machine,
                  options);
}

void require_backend_runs(const sim::Machine& machine) {
  if (machine.allocator_config != sim::AllocatorConfig{}) {
    throw sim::InputError("--alloc-conf",
                          "is simulated only: the host and CUDA backends run the caching "
                          "allocator in PyTorch's default configuration");
  }
}

ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Simulation& simulation,
                          const sim::Machine& machine, const ValidationOptions& options) {
  require_backend_runs(machine);
  ValidationReport r;
  const sim::Program& program = simulation.program;
  // The reference: in-core on a device with room for it (its own peak is what it needs).
  const sim::Program reference_program = sim::lower(workload, sim::in_core_plan(workload));
  r.calibrated = options.calibrate;
  sim::Engine engine;
  const sim::Timeline& predicted =
      options.calibrate ? calibrated_prediction(backend, workload, plan, reference_program, machine,
                                                options.seed, engine)
                        : simulation.timeline;
  r.predicted_feasible = predicted.feasible;
  r.peak_bytes_predicted = predicted.peak_bytes;
  r.peak_reserved_predicted = predicted.peak_reserved_bytes;
  r.iteration_ns_predicted = predicted.iteration_ns;

  const std::unique_ptr<Device> reference = backend.make_device(
      sim::capacity_to_run(reference_program, machine), options.seed, machine.allocator);
  if (!run_program(*reference, workload, reference_program).feasible) {
    // The simulator, with the same arena, says the reference fits this device: a disagreement
    // between the backend and the simulator is a bug, not a property of the plan.
    throw std::logic_error(backend.name() +
                           ": the in-core reference did not fit the memory the "
                           "simulator says it needs");
  }

  // One warm-up run, timed runs without copying results aside, then the run that is compared.
  std::vector<sim::Nanoseconds> times;
  // One device for all runs (prepare starts each afresh, with the same data): warm caches and
  // pages, as a training loop has them.
  const std::unique_ptr<Device> device =
      backend.make_device(plan_capacity(program, machine), options.seed, machine.allocator);
  const int timed = std::max(options.repetitions, 1);
  for (int k = 0; k <= timed + 1; ++k) {
    const bool compare_run = k == timed + 1;
    device->set_capture(compare_run);
    sim::Timeline measured = run_program(*device, workload, program);
    r.peak_bytes_measured = measured.peak_bytes;
    r.peak_reserved_measured = measured.peak_reserved_bytes;
    if (!measured.feasible) {
      r.measured_feasible = false;
      r.oom = measured.oom;
      return r;
    }
    if (k > 0 && !compare_run) times.push_back(measured.iteration_ns);
    if (compare_run) r.measured = std::move(measured);
  }
  std::sort(times.begin(), times.end());
  r.iteration_ns_measured = times[times.size() / 2];

  r.spilled_bytes = device->spilled_bytes();
  r.tolerance = tolerance_for(plan);
  const Comparison c = compare_runs(workload, *reference, *device, r.tolerance);
  r.gradients_match = c.match;
  r.bitwise_equal = c.bitwise_equal;
  r.max_abs_diff = c.max_abs_diff;
  r.max_rel_diff = c.max_rel_diff;
  r.max_tensor_rel_diff = c.max_tensor_rel_diff;
  r.worst_tensor = c.worst_tensor;
  r.worst_difference = c.worst_difference;
  r.tensors_compared = c.tensors_compared;
  return r;
}

BackendComparison compare_backends(const Backend& backend, const Backend& reference,
                                   const sim::Workload& workload, const sim::Plan& plan,
                                   const sim::Machine& machine, std::uint64_t seed) {
  BackendComparison c;
  c.tolerance = cross_backend_tolerance(plan);
  const sim::Program reference_program = sim::lower(workload, sim::in_core_plan(workload));
  const std::unique_ptr<Device> reference_device = reference.make_device(
      sim::capacity_to_run(reference_program, machine), seed, machine.allocator);
  const sim::Program program = sim::lower(workload, plan);
  const std::unique_ptr<Device> device =
      backend.make_device(plan_capacity(program, machine), seed, machine.allocator);
  if (!run_program(*reference_device, workload, reference_program).feasible ||
      !run_program(*device, workload, program).feasible) {
    c.fits = false;
    return c;
  }
  const Comparison k = compare_runs(workload, *reference_device, *device, c.tolerance);
  c.within_tolerance = k.match;
  c.max_abs_diff = k.max_abs_diff;
  c.max_rel_diff = k.max_rel_diff;
  c.tensors_compared = k.tensors_compared;
  c.worst_tensor = k.worst_tensor;
  c.worst_difference = k.worst_difference;
  return c;
}

}  // namespace memplan::runtime
