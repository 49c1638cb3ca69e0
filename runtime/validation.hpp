#pragma once
// Validation on a backend: runs a plan's Program and the in-core reference on Devices of one
// runtime::Backend with the same data and weights, and sets the simulator's prediction beside what
// was measured — peak device bytes (equal by construction of the shared arena, checked here),
// iteration time, and whether every gradient, the loss and the updated parameters and momentum
// match the in-core run. Keeps `memplan validate` a printer and lets tests check the same numbers.
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/backend.hpp"
#include "sim/machine.hpp"
#include "sim/plan.hpp"
#include "sim/timeline.hpp"
#include "sim/workload.hpp"

namespace memplan::runtime {

struct ValidationOptions {
  std::uint64_t seed = 1;
  int repetitions = 5;  // the plan's measured iteration time is the median of this many runs
  /// Predict with op durations and copy costs measured on the backend (calibrate) instead
  /// of the trace's: the prediction then tests the simulator's model, not the trace's numbers.
  bool calibrate = false;
};

/// A workload and machine whose costs are the backend's: every op's duration (and its algorithms')
/// is the median of its measured kernel time over `runs` in-core runs after one warm-up; the copy
/// bandwidths and latency are the backend's measure_link(). Memory is unchanged.
struct Calibration {
  sim::Workload workload;
  sim::Machine machine;
};
Calibration calibrate(const Backend& backend, const sim::Workload& workload,
                      const sim::Machine& machine, std::uint64_t seed = 1, int runs = 5);

/// The tensors a validation compares with the in-core run: gradients, parameters, optimizer
/// state, and the loss (the first output of the forward softmax_cross_entropy).
bool compared_by_validation(const sim::Workload& workload, const sim::Tensor& t);

struct ValidationReport {
  bool predicted_feasible = true;
  bool measured_feasible = true;
  std::optional<sim::OomReport> oom;  // the measured run's, when it ran out of memory
  sim::Bytes peak_bytes_predicted = 0;
  sim::Bytes peak_bytes_measured = 0;
  sim::Bytes peak_reserved_predicted = 0;
  sim::Bytes peak_reserved_measured = 0;
  sim::Nanoseconds iteration_ns_predicted = 0;
  sim::Nanoseconds iteration_ns_measured = 0;
  /// Every gradient, the loss, parameters and momentum bitwise equal to the in-core run's.
  bool gradients_match = false;
  /// Largest |plan - in-core| over those float tensors (0 when they match).
  double max_abs_diff = 0;
  std::size_t tensors_compared = 0;
  bool calibrated = false;

  /// (measured - predicted) / predicted iteration time, in percent.
  [[nodiscard]] double iteration_error_percent() const;
};

/// Runs `plan` (validated for `workload`) on a device of `backend` with machine.memory_bytes and
/// the in-core reference on a device large enough for it. Throws std::runtime_error when a kernel
/// fails or the backend cannot run a layer.
ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Machine& machine,
                          const ValidationOptions& options = {});

}  // namespace memplan::runtime
