#include "runtime/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/interpreter.hpp"
#include "sim/basic_plans.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::runtime {

namespace {}  // namespace

bool compared_by_validation(const sim::Workload& w, const sim::Tensor& t) {
  if (t.kind == sim::TensorKind::kGradient || t.kind == sim::TensorKind::kParameter ||
      t.kind == sim::TensorKind::kOptimizerState) {
    return true;
  }
  if (t.producer == sim::kNoId) return false;
  const sim::Op& op = w.op(t.producer);
  return op.layer == "softmax_cross_entropy" && op.phase == sim::Phase::kForward &&
         op.outputs.front() == t.id;
}

Calibration calibrate(const Backend& backend, const sim::Workload& workload,
                      const sim::Machine& machine, std::uint64_t seed, int runs) {
  Calibration c{workload, machine};
  const sim::Program program = sim::lower(workload, sim::in_core_plan(workload));
  const std::unique_ptr<Device> device =
      backend.make_device(sim::capacity_to_run(program, machine), seed);
  device->set_capture(false);
  std::vector<std::vector<sim::Nanoseconds>> op_ns(workload.ops.size());
  const auto& compute = program.stream(sim::StreamId::kCompute);
  for (int k = 0; k < std::max(runs, 1) + 1; ++k) {
    const sim::Timeline measured = run_program(*device, workload, program);
    if (k == 0) continue;  // warm-up
    for (const sim::Span& span : measured.spans) {
      if (span.stream != sim::StreamId::kCompute) continue;
      const sim::Instruction& in = compute[static_cast<std::size_t>(span.index)];
      op_ns[static_cast<std::size_t>(in.op)].push_back(span.end_ns - span.start_ns);
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
  const LinkModel link = backend.measure_link();
  c.machine.h2d_bytes_per_s = link.h2d_bytes_per_s;
  c.machine.d2h_bytes_per_s = link.d2h_bytes_per_s;
  c.machine.copy_latency_ns = link.latency_ns;
  return c;
}

double ValidationReport::iteration_error_percent() const {
  if (iteration_ns_predicted == 0) return 0;
  return 100.0 * static_cast<double>(iteration_ns_measured - iteration_ns_predicted) /
         static_cast<double>(iteration_ns_predicted);
}

ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Machine& machine,
                          const ValidationOptions& options) {
  ValidationReport r;
  const sim::Program program = sim::lower(workload, plan);
  sim::Engine engine;
  std::optional<Calibration> calibration;
  if (options.calibrate) calibration = calibrate(backend, workload, machine, options.seed);
  r.calibrated = calibration.has_value();
  const sim::Timeline& predicted =
      calibration ? engine.run(sim::lower(calibration->workload, plan), calibration->machine)
                  : engine.run(program, machine);
  r.predicted_feasible = predicted.feasible;
  r.peak_bytes_predicted = predicted.peak_bytes;
  r.peak_reserved_predicted = predicted.peak_reserved_bytes;
  r.iteration_ns_predicted = predicted.iteration_ns;

  // The reference: in-core on a device with room for it (its own peak is what it needs).
  const sim::Program reference_program = sim::lower(workload, sim::in_core_plan(workload));
  const std::unique_ptr<Device> reference =
      backend.make_device(sim::capacity_to_run(reference_program, machine), options.seed);
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
  const std::unique_ptr<Device> device = backend.make_device(machine.memory_bytes, options.seed);
  const int timed = std::max(options.repetitions, 1);
  for (int k = 0; k <= timed + 1; ++k) {
    const bool compare_run = k == timed + 1;
    device->set_capture(compare_run);
    const sim::Timeline measured = run_program(*device, workload, program);
    r.peak_bytes_measured = measured.peak_bytes;
    r.peak_reserved_measured = measured.peak_reserved_bytes;
    if (!measured.feasible) {
      r.measured_feasible = false;
      r.oom = measured.oom;
      return r;
    }
    if (k > 0 && !compare_run) times.push_back(measured.iteration_ns);
  }
  std::sort(times.begin(), times.end());
  r.iteration_ns_measured = times[times.size() / 2];

  r.gradients_match = true;
  for (const sim::Tensor& t : workload.tensors) {
    if (!compared_by_validation(workload, t)) continue;
    const auto want = reference->tensor_bytes(t.id);
    const auto got = device->tensor_bytes(t.id);
    ++r.tensors_compared;
    if (want.empty() || want.size() != got.size()) {
      r.gradients_match = false;
      r.max_abs_diff = INFINITY;
      continue;
    }
    if (want != got) r.gradients_match = false;
    if (t.dtype == "float32") {
      for (std::size_t i = 0; i + 4 <= want.size(); i += 4) {
        float a = 0;
        float b = 0;
        std::memcpy(&a, want.data() + i, 4);
        std::memcpy(&b, got.data() + i, 4);
        r.max_abs_diff = std::max(r.max_abs_diff, std::fabs(static_cast<double>(a) - b));
      }
    }
  }
  return r;
}

}  // namespace memplan::runtime
