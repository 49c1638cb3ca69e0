#include "host_backend/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "host_backend/host_device.hpp"
#include "runtime/interpreter.hpp"
#include "sim/basic_plans.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::host_backend {

namespace {

// Gradients, parameters, momentum and the loss (first output of a forward softmax_cross_entropy).
bool compared(const sim::Workload& w, const sim::Tensor& t) {
  if (t.kind == sim::TensorKind::kGradient || t.kind == sim::TensorKind::kParameter ||
      t.kind == sim::TensorKind::kOptimizerState) {
    return true;
  }
  if (t.producer == sim::kNoId) return false;
  const sim::Op& op = w.op(t.producer);
  return op.layer == "softmax_cross_entropy" && op.phase == sim::Phase::kForward &&
         op.outputs.front() == t.id;
}

}  // namespace

double ValidationReport::iteration_error_percent() const {
  if (iteration_ns_predicted == 0) return 0;
  return 100.0 * static_cast<double>(iteration_ns_measured - iteration_ns_predicted) /
         static_cast<double>(iteration_ns_predicted);
}

ValidationReport validate_on_host(const sim::Workload& workload, const sim::Plan& plan,
                                  const sim::Machine& machine, const ValidationOptions& options) {
  ValidationReport r;
  const sim::Program program = sim::lower(workload, plan);
  sim::Engine engine;
  const sim::Timeline& predicted = engine.run(program, machine);
  r.predicted_feasible = predicted.feasible;
  r.peak_bytes_predicted = predicted.peak_bytes;
  r.peak_reserved_predicted = predicted.peak_reserved_bytes;
  r.iteration_ns_predicted = predicted.iteration_ns;

  // The reference: in-core on a device with room for it (its own peak is what it needs).
  const sim::Program reference_program = sim::lower(workload, sim::in_core_plan(workload));
  sim::Machine roomy = machine;
  roomy.memory_bytes = std::int64_t{1} << 40;
  const sim::Bytes reference_need = engine.run(reference_program, roomy).peak_reserved_bytes;
  HostDevice reference(reference_need, options.seed);
  if (!runtime::run_program(reference, workload, reference_program).feasible) {
    r.measured_feasible = false;
    return r;
  }

  std::vector<sim::Nanoseconds> times;
  std::optional<HostDevice> device;
  for (int k = 0; k < std::max(options.repetitions, 1); ++k) {
    device.emplace(machine.memory_bytes, options.seed);
    const sim::Timeline measured = runtime::run_program(*device, workload, program);
    r.peak_bytes_measured = measured.peak_bytes;
    r.peak_reserved_measured = measured.peak_reserved_bytes;
    if (!measured.feasible) {
      r.measured_feasible = false;
      r.oom = measured.oom;
      return r;
    }
    times.push_back(measured.iteration_ns);
  }
  std::sort(times.begin(), times.end());
  r.iteration_ns_measured = times[times.size() / 2];

  r.gradients_match = true;
  for (const sim::Tensor& t : workload.tensors) {
    if (!compared(workload, t)) continue;
    const auto want = reference.tensor_bytes(t.id);
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

}  // namespace memplan::host_backend
