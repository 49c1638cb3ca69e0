#pragma once
// The CUDA backend as `memplan validate --backend cuda` and the [cuda] tests use it: a check that
// a device is present (one clear InputError when not), link measurement, calibration and
// validation of a plan on the GPU against the host backend's in-core reference.
#include <cstdint>

#include "host_backend/validation.hpp"
#include "sim/machine.hpp"
#include "sim/plan.hpp"
#include "sim/workload.hpp"

namespace memplan::cuda_backend {

/// Throws sim::InputError("--backend cuda", "no CUDA device: <reason>") when the process sees no
/// CUDA device (no driver, no GPU, or CUDA_VISIBLE_DEVICES hiding them all).
void require_cuda_device();

/// Host↔device links as measured with pinned memory: bandwidth of each direction fitted to timed
/// copies of two sizes, latency the intercept.
struct LinkMeasurement {
  double h2d_bytes_per_s = 0;
  double d2h_bytes_per_s = 0;
  sim::Nanoseconds copy_latency_ns = 0;
};
LinkMeasurement measure_link();

/// The workload and machine with this GPU's costs: every op's duration the median of its
/// CUDA-event time over `runs` in-core runs after a warm-up (convolution alternatives get cuDNN's
/// memory-optimal algorithm's time relative to the fastest), the links measured.
host_backend::Calibration calibrate_on_cuda(const sim::Workload& workload,
                                            const sim::Machine& machine, std::uint64_t seed = 1,
                                            int runs = 5);

/// Gradients of the GPU run are compared with the host backend's in-core run within
/// |gpu - host| <= kAbsoluteTolerance + kRelativeTolerance * |host| (cuDNN's algorithms sum in
/// other orders than the host's GEMMs, so results are close, not bitwise equal).
inline constexpr double kAbsoluteTolerance = 1e-5;
inline constexpr double kRelativeTolerance = 1e-3;

/// Runs `plan` on a CudaDevice of machine.memory_bytes (timed `options.repetitions` times, the
/// median reported) and the in-core reference on the host backend with the same seed; the report's
/// gradients_match means "within the tolerance above". Throws std::runtime_error (CudaError) when
/// a CUDA call or a kernel fails.
host_backend::ValidationReport validate_on_cuda(
    const sim::Workload& workload, const sim::Plan& plan, const sim::Machine& machine,
    const host_backend::ValidationOptions& options = {});

}  // namespace memplan::cuda_backend
