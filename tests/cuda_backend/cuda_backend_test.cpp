// The CUDA backend. Tests tagged [cuda] need a GPU and skip with a warning naming why when there
// is none; the others run everywhere. On a GPU: the shipped traces under in-core, swap-all and
// recompute-all reach the simulator's peaks to the byte and gradients, loss, weights and momentum
// within the stated tolerance of the host backend's; a cap below the need is an out-of-memory
// result at the simulator's allocation; the encoding kernels write the host backend's bytes.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "core/machine.hpp"
#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_device.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "cuda_backend/kernels.cuh"
#include "host_backend/encodings.hpp"
#include "host_backend/host_backend.hpp"
#include "io/trace_io.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/recording.hpp"
#include "runtime/validation.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/cuda_backend/cuda_test_support.hpp"
#include "tests/support/sim_helpers.hpp"

namespace mp = memplan;

using memplan::test::skip_without_device;

namespace {

mp::sim::Workload load(const std::string& name) {
  return mp::sim::read_trace(std::string(MEMPLAN_SOURCE_DIR) + "/traces/" + name + ".json");
}

/// True (after a warning naming the reason) when there is no CUDA device to test on.
/// Device memory holding a copy of `values`, freed on scope exit.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    REQUIRE(cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)) == cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    REQUIRE(cudaMemcpy(p_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p_); }
  T* get() const { return static_cast<T*>(p_); }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

/// A feature map as ReLU leaves it: about half zeros, some -0.0, wide range of magnitudes.
std::vector<float> relu_like(std::int64_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = normal(rng);
    x[i] = v > 0.0f ? v * (i % 7 == 0 ? 1e-5f : 1.0f) : (i % 11 == 0 ? -0.0f : 0.0f);
  }
  x[3] = 1e9f;  // saturates in every narrow format
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the cuda backend without a device is one InputError naming the reason",
          "[cuda_backend]") {
  const mp::cuda_backend::CudaEnvironment env = mp::cuda_backend::probe_cuda();
  if (env.device_count > 0) {
    CHECK_NOTHROW(mp::cuda_backend::require_cuda_device());
    return;
  }
  try {
    mp::cuda_backend::require_cuda_device();
    FAIL("require_cuda_device returned without a device");
  } catch (const mp::sim::InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("--backend cuda") != std::string::npos);
    CHECK(what.find("no CUDA device: " + env.unavailable_reason) != std::string::npos);
  }
}

TEST_CASE("the GPU runs the shipped traces: simulator's peaks, in-core gradients",
          "[cuda][validate]") {
  if (skip_without_device()) return;
  const std::string trace = GENERATE(std::string("mlp4"), std::string("resnet_tiny"));
  const std::string plan_name =
      GENERATE(std::string("in-core"), std::string("swap-all"), std::string("recompute-all"));
  CAPTURE(trace, plan_name);
  const mp::sim::Workload w = load(trace);
  const mp::sim::Machine machine = mp::sim::make_machine(w.device);
  const mp::sim::Plan plan = *mp::sim::basic_plan(plan_name, w);
  mp::runtime::ValidationOptions options;
  options.repetitions = 3;
  const mp::cuda_backend::CudaBackend backend;
  const auto r = mp::runtime::validate(backend, w, plan, machine, options);
  CHECK(r.predicted_feasible);
  CHECK(r.measured_feasible);
  CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
  CHECK(r.peak_reserved_measured == r.peak_reserved_predicted);
  CHECK(r.tensors_compared > 0);
  // One backend, one algorithm per op: bitwise the GPU's own in-core run.
  CHECK(r.gradients_match);
  CHECK(r.max_abs_diff == 0.0);
  CHECK(r.iteration_ns_measured > 0);

  // Against the host backend: close, within the stated tolerance.
  const auto host =
      mp::runtime::compare_backends(backend, mp::host_backend::HostBackend(), w, plan, machine);
  CHECK(host.fits);
  CHECK(host.tensors_compared == r.tensors_compared);
  CHECK(host.within_tolerance);
  CHECK(host.max_abs_diff < 1e-3);
}

TEST_CASE("the CUDA backend measures its link and records a trace", "[cuda][record]") {
  if (skip_without_device()) return;
  const mp::cuda_backend::CudaBackend backend;
  const mp::sim::Link link = backend.measure_link();
  CHECK(link.h2d_bytes_per_s > 1e8);  // any PCIe or NVLink is faster than 100 MB/s
  CHECK(link.d2h_bytes_per_s > 1e8);
  CHECK(link.latency_ns >= 0);
  const mp::sim::Workload w = load("resnet_tiny");
  const mp::runtime::Recording rec = mp::runtime::record(backend, w);
  CHECK(rec.workload.device.name.find("cuda") != std::string::npos);
  CHECK(rec.iteration_ns > 0);
  for (const mp::sim::Op& op : rec.workload.ops) CHECK(op.duration_ns > 0);
}

TEST_CASE("a CUDA recording carries cuDNN's fastest and memory-optimal algorithms",
          "[cuda][record]") {
  if (skip_without_device()) return;
  const mp::cuda_backend::CudaBackend backend;
  const mp::sim::Workload w = load("resnet_tiny");
  const auto found = backend.find_algorithms(w);
  const mp::runtime::Recording rec = mp::runtime::record(backend, w);
  std::size_t convs = 0;
  for (const mp::sim::Op& op : rec.workload.ops) {
    CAPTURE(op.name);
    if (op.layer != mp::sim::Layer::kConv2d || op.phase == mp::sim::Phase::kUpdate) {
      CHECK_FALSE(found.contains(op.id));
      continue;
    }
    ++convs;
    REQUIRE(found.contains(op.id));
    const mp::runtime::FoundAlgorithms& f = found.at(op.id);
    CHECK(op.workspace_bytes == f.fastest.workspace_bytes);
    CHECK(f.memory_optimal.workspace_bytes <= f.fastest.workspace_bytes);
    // cudnnFind lists algorithms fastest first (heuristics' rankings carry no time: both 0).
    CHECK(f.memory_optimal.duration_ns >= f.fastest.duration_ns);
    if (f.memory_optimal.workspace_bytes < f.fastest.workspace_bytes) {
      REQUIRE(op.algorithms.size() == 1);
      CHECK(op.algorithms[0].name == "memory_optimal");
      CHECK(op.algorithms[0].workspace_bytes == f.memory_optimal.workspace_bytes);
      CHECK(op.algorithms[0].duration_ns ==
            op.duration_ns + f.memory_optimal.duration_ns - f.fastest.duration_ns);
    } else {
      CHECK(op.algorithms.empty());
    }
  }
  CHECK(convs == found.size());
  // A plan choosing every memory-optimal alternative runs on the GPU within the simulator's peak.
  mp::sim::Plan plan = mp::sim::in_core_plan(rec.workload);
  for (const mp::sim::Op& op : rec.workload.ops) {
    if (!op.algorithms.empty()) plan.algorithms.push_back({op.id, 0});
  }
  const mp::sim::Program program = mp::sim::lower(rec.workload, plan);
  mp::sim::Engine engine;
  const mp::sim::Timeline predicted =
      engine.run(program, mp::sim::make_machine(rec.workload.device));
  REQUIRE(predicted.feasible);
  mp::cuda_backend::CudaDevice device(rec.workload.device.memory_bytes);
  const mp::sim::Timeline measured = mp::runtime::run_program(device, rec.workload, program);
  REQUIRE(measured.feasible);
  CHECK(device.memory_stats().peak_bytes == predicted.peak_bytes);
}

TEST_CASE("on one GPU, swap-all and recompute-all give the in-core run's bits", "[cuda][runtime]") {
  if (skip_without_device()) return;
  // Deterministic cuDNN algorithms, found once per device, so each op runs the same algorithm
  // whatever the plan: keep, swap and recompute change where values live, not their bits.
  const mp::sim::Workload w = load("resnet_tiny");
  mp::cuda_backend::CudaDevice device(mp::sim::Bytes{64} << 20);
  auto results = [&](const mp::sim::Plan& plan) {
    const mp::sim::Program program = mp::sim::lower(w, plan);
    REQUIRE(mp::runtime::run_program(device, w, program).feasible);
    std::vector<std::vector<std::byte>> out;
    for (const mp::sim::Tensor& t : w.tensors) {
      if (t.kind == mp::sim::TensorKind::kGradient || t.kind == mp::sim::TensorKind::kParameter) {
        out.push_back(device.tensor_bytes(t.id));
      }
    }
    return out;
  };
  const auto in_core = results(mp::sim::in_core_plan(w));
  CHECK(results(mp::sim::swap_all_plan(w)) == in_core);
  CHECK(results(mp::sim::recompute_all_plan(w)) == in_core);
}

TEST_CASE("a GPU cap below the plan's need is an out-of-memory result where the simulator says",
          "[cuda][runtime]") {
  if (skip_without_device()) return;
  const std::string trace = GENERATE(std::string("mlp4"), std::string("resnet_tiny"));
  CAPTURE(trace);
  const mp::sim::Workload w = load(trace);
  const mp::sim::Program program = mp::sim::lower(w, mp::sim::swap_all_plan(w));
  mp::sim::Machine machine = mp::sim::make_machine(w.device);
  mp::sim::Engine engine;
  machine.memory_bytes = engine.run(program, machine).peak_bytes - 1;
  const mp::sim::Timeline predicted = engine.run(program, machine);
  REQUIRE_FALSE(predicted.feasible);

  mp::cuda_backend::CudaDevice device(machine.memory_bytes);
  mp::sim::Timeline measured;
  REQUIRE_NOTHROW(measured = mp::runtime::run_program(device, w, program));
  CHECK_FALSE(measured.feasible);
  REQUIRE(measured.oom.has_value());
  CHECK(measured.oom->buffer == predicted.oom->buffer);
  CHECK(measured.oom->requested_bytes == predicted.oom->requested_bytes);
  CHECK(device.memory_stats().peak_reserved_bytes <= machine.memory_bytes);
}

TEST_CASE("Gist's encodings on the GPU write the host backend's bytes", "[cuda][encodings]") {
  if (skip_without_device()) return;
  namespace hb = mp::host_backend;
  namespace k = mp::cuda_backend::kernels;
  const std::int64_t n = GENERATE(std::int64_t{1}, std::int64_t{255}, std::int64_t{1000});
  CAPTURE(n);
  const std::vector<float> x = relu_like(n);
  const DeviceArray<float> dx(x);
  cudaStream_t s = nullptr;  // the default stream

  SECTION("binarize") {
    std::vector<std::uint8_t> want(static_cast<std::size_t>(hb::binarize_bytes(n)));
    hb::binarize_encode(n, x.data(), want.data());
    DeviceArray<std::uint8_t> bits(want.size());
    REQUIRE(k::binarize_encode(s, n, dx.get(), bits.get()) == cudaSuccess);
    CHECK(bits.download() == want);
    DeviceArray<float> back(static_cast<std::size_t>(n));
    REQUIRE(k::binarize_decode(s, n, bits.get(), back.get()) == cudaSuccess);
    std::vector<float> host_back(static_cast<std::size_t>(n));
    hb::binarize_decode(n, want.data(), host_back.data());
    CHECK(same_bits(back.download(), host_back));
  }
  SECTION("sparse") {
    const std::int64_t capacity = hb::sparse_bytes(n, hb::count_nonzeros(n, x.data()));
    std::vector<std::uint8_t> want(static_cast<std::size_t>(capacity));
    REQUIRE(hb::sparse_encode(n, x.data(), want.data(), capacity) == capacity);
    DeviceArray<std::uint8_t> packed(want.size());
    DeviceArray<std::byte> scratch(static_cast<std::size_t>(k::sparse_scratch_bytes(n)));
    DeviceArray<int> overflow(1);
    REQUIRE(k::sparse_encode(s, n, dx.get(), packed.get(), capacity, scratch.get(),
                             overflow.get()) == cudaSuccess);
    CHECK(overflow.download()[0] == 0);
    CHECK(packed.download() == want);
    DeviceArray<float> back(static_cast<std::size_t>(n));
    REQUIRE(k::sparse_decode(s, n, packed.get(), back.get(), scratch.get()) == cudaSuccess);
    CHECK(same_bits(back.download(), x));
    // One byte short: the overflow is reported.
    REQUIRE(k::sparse_encode(s, n, dx.get(), packed.get(), capacity - 1, scratch.get(),
                             overflow.get()) == cudaSuccess);
    CHECK(overflow.download()[0] == 1);
  }
  SECTION("narrow floats") {
    for (const hb::NarrowFloat f : {hb::kFp16, hb::kFp10, hb::kFp8}) {
      CAPTURE(f.bits());
      std::vector<std::uint8_t> want(static_cast<std::size_t>(hb::narrow_bytes(f, n)));
      hb::narrow_encode(f, n, x.data(), want.data());
      DeviceArray<std::uint8_t> packed(want.size());
      REQUIRE(k::narrow_encode(s, f.exponent_bits, f.mantissa_bits, n, dx.get(), packed.get()) ==
              cudaSuccess);
      CHECK(packed.download() == want);
      DeviceArray<float> back(static_cast<std::size_t>(n));
      REQUIRE(k::narrow_decode(s, f.exponent_bits, f.mantissa_bits, n, packed.get(), back.get()) ==
              cudaSuccess);
      std::vector<float> host_back(static_cast<std::size_t>(n));
      hb::narrow_decode(f, n, want.data(), host_back.data());
      CHECK(same_bits(back.download(), host_back));
    }
  }
}

TEST_CASE("cuDNN reports a fastest and a memory-optimal algorithm per convolution",
          "[cuda][conv]") {
  if (skip_without_device()) return;
  const mp::sim::Workload w = load("resnet_tiny");
  const mp::sim::Program program = mp::sim::lower(w, mp::sim::in_core_plan(w));
  mp::cuda_backend::CudaDevice device(mp::sim::Bytes{64} << 20);
  REQUIRE(mp::runtime::run_program(device, w, program).feasible);
  const auto& found = device.conv_algorithms();
  std::size_t convs = 0;
  for (const mp::sim::Op& op : w.ops) {
    if (op.layer != mp::sim::Layer::kConv2d || op.phase == mp::sim::Phase::kUpdate) continue;
    ++convs;
    CAPTURE(op.name);
    REQUIRE(found.contains(op.id));
    const auto& c = found.at(op.id);
    CHECK(c.memory_optimal_workspace() <= c.fastest_workspace());
    CHECK(c.fastest_ms() > 0);
  }
  CHECK(convs > 0);
}
