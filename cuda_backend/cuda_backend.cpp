#include "cuda_backend/cuda_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/input_error.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_device.hpp"
#include "cuda_backend/cuda_environment.hpp"

namespace memplan::cuda_backend {

namespace {

/// Median time in ns of `repeat` copies of `bytes` in one direction, timed by CUDA events.
double copy_ns(std::size_t bytes, bool to_device, int repeat) {
  PinnedBuffer host(bytes);
  void* device = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  const auto release = [&] {
    if (end != nullptr) MEMPLAN_CUDA_REPORT(cudaEventDestroy(end));
    if (start != nullptr) MEMPLAN_CUDA_REPORT(cudaEventDestroy(start));
    if (s != nullptr) MEMPLAN_CUDA_REPORT(cudaStreamDestroy(s));
    if (device != nullptr) MEMPLAN_CUDA_REPORT(cudaFree(device));
  };
  std::vector<double> t;
  try {
    MEMPLAN_CUDA_CHECK(cudaMalloc(&device, bytes));
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
    release();
    throw;
  }
  release();
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

CudaBackend::CudaBackend() : algorithms_(std::make_shared<ConvAlgorithmCache>()) {}

std::unique_ptr<runtime::Device> CudaBackend::make_device(sim::Bytes capacity_bytes,
                                                          std::uint64_t seed,
                                                          sim::AllocatorModel allocator) const {
  return std::make_unique<CudaDevice>(capacity_bytes, seed, allocator, algorithms_);
}

sim::Link CudaBackend::measure_link() const {
  constexpr std::size_t kSmall = 4096;
  constexpr std::size_t kLarge = std::size_t{64} << 20;
  sim::Link link;
  double latency = 0;
  for (const bool to_device : {true, false}) {
    const double small = copy_ns(kSmall, to_device, 21);
    const double large = copy_ns(kLarge, to_device, 5);
    const double ns_per_byte = std::max(large - small, 1.0) / static_cast<double>(kLarge - kSmall);
    (to_device ? link.h2d_bytes_per_s : link.d2h_bytes_per_s) = 1e9 / ns_per_byte;
    latency = std::max(latency, small - ns_per_byte * static_cast<double>(kSmall));
  }
  link.latency_ns = static_cast<sim::Nanoseconds>(std::max(latency, 0.0));
  return link;
}

std::map<sim::OpId, runtime::FoundAlgorithms> CudaBackend::find_algorithms(
    const sim::Workload& workload) const {
  CudaOpExecutor executor(workload, nullptr, algorithms_);  // nullptr: the default stream
  executor.find_algorithms();
  const auto ns = [](double ms) { return static_cast<sim::Nanoseconds>(std::llround(ms * 1e6)); };
  std::map<sim::OpId, runtime::FoundAlgorithms> found;
  for (const auto& [op, c] : executor.conv_algorithms()) {
    runtime::FoundAlgorithms& f = found[op];
    f.fastest = {c.fastest_workspace(), ns(c.fastest_ms())};
    f.memory_optimal = {c.memory_optimal_workspace(), ns(c.memory_optimal_ms())};
  }
  return found;
}

void require_cuda_device() {
  const CudaEnvironment env = probe_cuda();
  if (env.device_count == 0) {
    throw sim::InputError("--backend cuda", "no CUDA device: " + env.unavailable_reason);
  }
}

std::unique_ptr<runtime::Backend> make_cuda_backend() {
  require_cuda_device();
  return std::make_unique<CudaBackend>();
}

}  // namespace memplan::cuda_backend
