#pragma once
// Validation on a backend: runs a plan's Program and the in-core reference on Devices of one
// runtime::Backend with the same data and weights, and sets the simulator's prediction beside what
// was measured — peak device bytes (equal by construction of the shared arena, checked here),
// iteration time, and whether every gradient, the loss and the updated parameters and momentum
// match the in-core run. Keeps `memplan validate` a printer and lets tests check the same numbers.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "runtime/backend.hpp"
#include "sim/simulation.hpp"
#include "sim/timeline.hpp"

namespace memplan::runtime {

/// Throws InputError when the backends cannot run a step on `machine` as the simulator does: a
/// caching allocator configured otherwise than PyTorch's default (--alloc-conf) is simulated only.
void require_backend_runs(const sim::Machine& machine);

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

/// Note [Validation tolerance]: how a plan's results are held to the in-core run's.
/// - Bitwise, for every plan without precision reduction: keep, swap and recompute run the same
///   kernels on the same values, binarize and sparse decode to exactly the values backward reads
///   (sparse stores every value but +0.0; binarized and narrowed maps are refused where a forward
///   op re-run by a recompute would read them). Every compared tensor byte for byte.
/// - Within a tolerance, for a plan that narrows maps (encode:fp16, fp10, fp8): backward reads each
///   narrowed value with a relative error up to the format's unit roundoff u = 2^-(mantissa bits
///   + 1) (fp16 2^-11, fp10 2^-5, fp8 2^-4), and a gradient is a sum of such values times upstream
///   gradients that carry the errors of the narrowed maps after it, so to first order the errors
///   of the plan's L narrowed maps add up. The test is norm-wise over each group of compared
///   tensors taken as one vector — the gradients (of activations and weights) with the optimizer
///   state that accumulates them; the parameters; the loss:
///     ||plan - in-core||_2 <= min(kToleranceFactor * L * u, kMaxRelativeTolerance) *
///     ||in-core||_2.
///   Not element-wise: a value below the format's smallest subnormal rounds to zero and flips that
///   element's ReLU mask. Not per tensor: a weight gradient sums over the batch and may nearly
///   cancel, so that errors within u of each term are large relative to the small result (the
///   property test found fp8 on the softmax output giving a conv bias gradient off by 31%, and, for
///   a network whose two samples reach the last layer alike, every weight gradient off by 100%:
///   there they are the residual of probabilities that fp8 rounds to exactly 1/2). The factor is
///   slack over the first-order sum for layers that amplify errors (batch-norm divides by the
///   batch's standard deviation); the cap keeps the test meaningful (a bound of 1 or more would
///   pass a zero gradient). Non-float tensors must still be bitwise equal.
///   This is a stated engineering bound, not a proof: fp8's 4 exponent bits flush activations
///   below 2^-10 to zero, and where such an activation carries a large gradient its flipped ReLU
///   mask can move the gradients past it (4 of 4206 random fp8 plans; resnet18 at batch 2, 32x32,
///   where batch-norm over two values amplifies fp10 and fp8 noise: docs/runtime.md). Validation
///   then reports a mismatch, which is the point of it.
struct Tolerance {
  bool bitwise = true;
  double relative = 0;  // the norm-wise bound's factor of ||in-core||_2 (0 when bitwise)
  int narrowed_maps = 0;
  double unit_roundoff = 0;  // of the plan's coarsest narrow format
};
/// The slack of the norm-wise bound over the first-order error sum, and its cap (above).
inline constexpr double kToleranceFactor = 4.0;
inline constexpr double kMaxRelativeTolerance = 0.5;
/// The tolerance `plan`'s results are held to.
Tolerance tolerance_for(const sim::Plan& plan);

/// Note [Cross-backend tolerance]: another backend's kernels (cuDNN's algorithms, cuBLAS) sum in
/// other orders than the host's, so a GPU's results are close to the host's, not bitwise equal.
/// They are held to the norm-wise bound of Note [Validation tolerance] with a relative factor of
/// at least kCrossBackendTolerance (the plan's own, when it narrows maps, if larger). So is a plan
/// that runs some ops with an alternative algorithm (Plan::algorithms) against the in-core run on
/// the same backend. Measured on an H100 (ResNet-18, batch 32, 224x224, fp32 without TF32): the
/// gradients' relative L2 against the host backend is 2.1e-3 with cuDNN's fastest algorithms and
/// 1.1e-3 with its memory-optimal ones; the worst tensors are batch-norm bias gradients, sums
/// that nearly cancel. A wrong kernel is off by O(1). Batch-norm over a handful of values (a 1x1
/// map at batch 2) amplifies the same rounding to 2.4e-2: a test must not compare there.
inline constexpr double kCrossBackendTolerance = 1e-2;
/// The tolerance of `plan`'s results on one backend against the in-core run on another.
Tolerance cross_backend_tolerance(const sim::Plan& plan);

/// The tensors a validation compares with the in-core run: gradients, parameters, optimizer
/// state, and the loss (the first output of the forward softmax_cross_entropy).
bool compared_by_validation(const sim::Workload& workload, const sim::Tensor& t);

/// How one run's results compare with the in-core reference's.
struct Comparison {
  bool match = true;          // bitwise, or within the tolerance when it is not bitwise
  bool bitwise_equal = true;  // every compared tensor byte for byte
  double max_abs_diff = 0;    // largest |run - reference| over the float32 elements
  double max_rel_diff = 0;    // largest ||run - reference||_2 / ||reference||_2 over the groups
  double max_tensor_rel_diff = 0;  // the same per tensor (reported, not tested)
  std::size_t tensors_compared = 0;
  /// The tensor that differs most, and how ("relative L2 0.02", "missing in the reference",
  /// "int64 values differ"): empty when every tensor is bitwise equal.
  std::string worst_tensor;
  std::string worst_difference;
};
/// Compares the tensors compared_by_validation names, as `run` and `reference` left them
/// (Device::tensor_bytes), under `tolerance` (Note [Validation tolerance]).
Comparison compare_runs(const sim::Workload& workload, const Device& reference, const Device& run,
                        const Tolerance& tolerance);

/// `plan` run on `backend` against the in-core plan run on `reference`, another backend.
struct BackendComparison {
  bool fits = true;  // both runs fit (the plan's under machine.memory_bytes)
  bool within_tolerance = false;
  double max_abs_diff = 0;  // largest |run - reference| over the float32 elements
  double max_rel_diff = 0;  // largest ||run - reference||_2 / ||reference||_2 over the groups
  std::size_t tensors_compared = 0;
  std::string worst_tensor;  // as Comparison's
  std::string worst_difference;
  Tolerance tolerance;  // cross_backend_tolerance(plan)
};
/// Runs both from `seed` and compares what the steps leave with compare_runs under
/// cross_backend_tolerance(plan).
BackendComparison compare_backends(const Backend& backend, const Backend& reference,
                                   const sim::Workload& workload, const sim::Plan& plan,
                                   const sim::Machine& machine, std::uint64_t seed = 1);

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
  /// Every gradient, the loss, parameters and momentum equal to the in-core run's: bitwise, or
  /// within `tolerance` for a plan that narrows maps (Note [Validation tolerance]).
  bool gradients_match = false;
  /// Whether they are also bitwise equal.
  bool bitwise_equal = false;
  Tolerance tolerance;
  /// Largest |plan - in-core| over the elements of those float tensors (0 when bitwise equal).
  double max_abs_diff = 0;
  /// Largest ||plan - in-core||_2 / ||in-core||_2 over the groups of Note [Validation
  /// tolerance] (0 when equal), and the same per tensor (reported, not tested).
  double max_rel_diff = 0;
  double max_tensor_rel_diff = 0;
  std::string worst_tensor;  // Comparison's: the tensor that differs most, and how
  std::string worst_difference;
  std::size_t tensors_compared = 0;
  /// Bytes of sparse maps denser than planned that went to host memory (Device::spilled_bytes).
  sim::Bytes spilled_bytes = 0;
  bool calibrated = false;
  /// The compared run as the backend ran it (run_program's timeline: its allocator events are
  /// what `validate --snapshot-out` writes); empty when it did not run to the end.
  sim::Timeline measured;

  /// (measured - predicted) / predicted iteration time, in percent.
  [[nodiscard]] double iteration_error_percent() const;
  /// Measured peak device bytes (live and reserved) equal to the prediction's.
  [[nodiscard]] bool peaks_match() const {
    return peak_bytes_measured == peak_bytes_predicted &&
           peak_reserved_measured == peak_reserved_predicted;
  }
};

/// Why a validation failed, one line each (empty when it passed): the run ran out of memory, the
/// measured peak differs from the prediction, or the results differ from the in-core run's
/// beyond what Note [Validation tolerance] allows. What `memplan validate` prints before exit 1.
std::vector<std::string> validation_failures(const ValidationReport& report);

/// Runs `simulation`'s Program (of `plan`, validated for `workload`, simulated on `machine`) on a
/// device of `backend` with machine.memory_bytes and the in-core reference on a device large
/// enough for it; the prediction is `simulation`'s Timeline (with options.calibrate, the plan
/// simulated again with the backend's costs). Throws BackendError when a kernel
/// fails, sim::InputError when the backend has no kernel for an op's layer.
ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Simulation& simulation,
                          const sim::Machine& machine, const ValidationOptions& options = {});
/// The same, lowering and simulating `plan` first.
ValidationReport validate(const Backend& backend, const sim::Workload& workload,
                          const sim::Plan& plan, const sim::Machine& machine,
                          const ValidationOptions& options = {});

}  // namespace memplan::runtime
