#include "cuda_backend/cuda_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_device.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "host_backend/host_device.hpp"
#include "runtime/interpreter.hpp"
#include "sim/basic_plans.hpp"
#include "sim/engine.hpp"
#include "sim/input_error.hpp"
#include "sim/lowering.hpp"

namespace memplan::cuda_backend {

namespace {

// Gradients, parameters, momentum and the loss (first output of a forward softmax_cross_entropy),
// as host_backend's validation compares them.
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

/// Median time in ns of `repeat` copies of `bytes` in one direction, timed by CUDA events.
double copy_ns(std::size_t bytes, bool to_device, int repeat) {
  PinnedBuffer host(bytes);
  void* device = nullptr;
  MEMPLAN_CUDA_CHECK(cudaMalloc(&device, bytes));
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  std::vector<double> t;
  try {
    MEMPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MEMPLAN_CUDA_CHECK(cudaEventCreate(&start));
    MEMPLAN_CUDA_CHECK(cudaEventCreate(&end));
    for (int i = 0; i <= repeat; ++i) {
      MEMPLAN_CUDA_CHECK(cudaEventRecord(start, s));
      if (to_device) {
        MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), bytes, cudaMemcpyHostToDevice, s));
      } else {
        MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDeviceToHost, s));
      }
      MEMPLAN_CUDA_CHECK(cudaEventRecord(end, s));
      MEMPLAN_CUDA_CHECK(cudaEventSynchronize(end));
      float ms = 0;
      MEMPLAN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
      if (i > 0) t.push_back(static_cast<double>(ms) * 1e6);  // the first is a warm-up
    }
  } catch (...) {
    if (end != nullptr) cudaEventDestroy(end);
    if (start != nullptr) cudaEventDestroy(start);
    if (s != nullptr) cudaStreamDestroy(s);
    cudaFree(device);
    throw;
  }
  cudaEventDestroy(end);
  cudaEventDestroy(start);
  cudaStreamDestroy(s);
  cudaFree(device);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

void require_cuda_device() {
  const CudaEnvironment env = probe_cuda();
  if (env.device_count == 0) {
    throw sim::InputError("--backend cuda", "no CUDA device: " + env.unavailable_reason);
  }
}

LinkMeasurement measure_link() {
  constexpr std::size_t kSmall = 4096;
  constexpr std::size_t kLarge = std::size_t{64} << 20;
  LinkMeasurement m;
  double latency = 0;
  for (const bool to_device : {true, false}) {
    const double small = copy_ns(kSmall, to_device, 21);
    const double large = copy_ns(kLarge, to_device, 5);
    const double ns_per_byte = std::max(large - small, 1.0) / static_cast<double>(kLarge - kSmall);
    (to_device ? m.h2d_bytes_per_s : m.d2h_bytes_per_s) = 1e9 / ns_per_byte;
    latency = std::max(latency, small - ns_per_byte * static_cast<double>(kSmall));
  }
  m.copy_latency_ns = static_cast<sim::Nanoseconds>(std::max(latency, 0.0));
  return m;
}

host_backend::Calibration calibrate_on_cuda(const sim::Workload& workload,
                                            const sim::Machine& machine, std::uint64_t seed,
                                            int runs) {
  host_backend::Calibration c{workload, machine};
  const sim::Program program = sim::lower(workload, sim::in_core_plan(workload));
  sim::Machine roomy = machine;
  roomy.memory_bytes = std::int64_t{1} << 40;
  sim::Engine engine;
  CudaDevice device(engine.run(program, roomy).peak_reserved_bytes, seed);
  device.set_capture(false);
  std::vector<std::vector<sim::Nanoseconds>> op_ns(workload.ops.size());
  const auto& compute = program.stream(sim::StreamId::kCompute);
  for (int k = 0; k < std::max(runs, 1) + 1; ++k) {
    const sim::Timeline measured = runtime::run_program(device, workload, program);
    if (k == 0) continue;  // warm-up
    for (const sim::Span& span : measured.spans) {
      if (span.stream != sim::StreamId::kCompute) continue;
      const sim::Instruction& in = compute[static_cast<std::size_t>(span.index)];
      op_ns[static_cast<std::size_t>(in.op)].push_back(span.end_ns - span.start_ns);
    }
  }
  const auto& conv = device.conv_algorithms();
  for (std::size_t o = 0; o < workload.ops.size(); ++o) {
    auto& times = op_ns[o];
    if (times.empty()) continue;
    std::sort(times.begin(), times.end());
    sim::Op& op = c.workload.ops[o];
    op.duration_ns = std::max<sim::Nanoseconds>(times[times.size() / 2], 1);
    const auto it = conv.find(op.id);
    for (sim::Algorithm& a : op.algorithms) {
      // The alternative runs cuDNN's memory-optimal algorithm: scale by cudnnFind's ratio.
      double ratio = 1.0;
      if (it != conv.end() && it->second.fastest_ms() > 0 && a.workspace_bytes == 0) {
        ratio = it->second.memory_optimal_ms() / it->second.fastest_ms();
      }
      a.duration_ns = std::max<sim::Nanoseconds>(
          static_cast<sim::Nanoseconds>(static_cast<double>(op.duration_ns) * ratio), 1);
    }
  }
  const LinkMeasurement link = measure_link();
  c.machine.h2d_bytes_per_s = link.h2d_bytes_per_s;
  c.machine.d2h_bytes_per_s = link.d2h_bytes_per_s;
  c.machine.copy_latency_ns = link.copy_latency_ns;
  return c;
}

host_backend::ValidationReport validate_on_cuda(const sim::Workload& workload,
                                                const sim::Plan& plan, const sim::Machine& machine,
                                                const host_backend::ValidationOptions& options) {
  require_cuda_device();
  host_backend::ValidationReport r;
  const sim::Program program = sim::lower(workload, plan);
  sim::Engine engine;
  std::optional<host_backend::Calibration> calibration;
  if (options.calibrate) calibration = calibrate_on_cuda(workload, machine, options.seed);
  r.calibrated = calibration.has_value();
  const sim::Timeline& predicted =
      calibration ? engine.run(sim::lower(calibration->workload, plan), calibration->machine)
                  : engine.run(program, machine);
  r.predicted_feasible = predicted.feasible;
  r.peak_bytes_predicted = predicted.peak_bytes;
  r.peak_reserved_predicted = predicted.peak_reserved_bytes;
  r.iteration_ns_predicted = predicted.iteration_ns;

  // The reference: in-core on the host backend, with the same seed (same data and weights).
  const sim::Program reference_program = sim::lower(workload, sim::in_core_plan(workload));
  sim::Machine roomy = machine;
  roomy.memory_bytes = std::int64_t{1} << 40;
  const sim::Bytes reference_need = engine.run(reference_program, roomy).peak_reserved_bytes;
  host_backend::HostDevice reference(reference_need, options.seed);
  if (!runtime::run_program(reference, workload, reference_program).feasible) {
    r.measured_feasible = false;
    return r;
  }

  // One warm-up run, timed runs without copying results aside, then the run that is compared.
  std::vector<sim::Nanoseconds> times;
  CudaDevice device(machine.memory_bytes, options.seed);
  const int timed = std::max(options.repetitions, 1);
  for (int k = 0; k <= timed + 1; ++k) {
    const bool compare_run = k == timed + 1;
    device.set_capture(compare_run);
    const sim::Timeline measured = runtime::run_program(device, workload, program);
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
    if (!compared(workload, t)) continue;
    const auto want = reference.tensor_bytes(t.id);
    const auto got = device.tensor_bytes(t.id);
    ++r.tensors_compared;
    if (want.empty() || want.size() != got.size()) {
      r.gradients_match = false;
      r.max_abs_diff = INFINITY;
      continue;
    }
    if (t.dtype != "float32" && !t.dtype.empty()) {
      if (want != got) r.gradients_match = false;
      continue;
    }
    for (std::size_t i = 0; i + 4 <= want.size(); i += 4) {
      float a = 0;
      float b = 0;
      std::memcpy(&a, want.data() + i, 4);
      std::memcpy(&b, got.data() + i, 4);
      const double diff = std::fabs(static_cast<double>(a) - b);
      r.max_abs_diff = std::max(r.max_abs_diff, diff);
      if (!(diff <= kAbsoluteTolerance + kRelativeTolerance * std::fabs(static_cast<double>(a)))) {
        r.gradients_match = false;
      }
    }
  }
  return r;
}

}  // namespace memplan::cuda_backend
