#include "host_backend/host_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <fmt/core.h>

#include "core/host_memory.hpp"
#include "core/input_error.hpp"
#include "host_backend/host_device.hpp"

namespace memplan::host_backend {

namespace {

/// Median time of `repeat` calls of f, in ns.
template <class F>
double median_ns(int repeat, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Median time for a task enqueued on an idle stream worker to run (a thread wake-up).
double handoff_ns() {
  StreamWorker worker;
  std::vector<double> t;
  for (int i = 0; i < 51; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point ran;
    worker.enqueue([&ran] { ran = std::chrono::steady_clock::now(); });
    worker.drain();
    t.push_back(std::chrono::duration<double, std::nano>(ran - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::unique_ptr<runtime::Device> HostBackend::make_device(sim::Bytes capacity_bytes,
                                                          std::uint64_t seed,
                                                          sim::AllocatorModel allocator) const {
  // The device's memory is this machine's: a run that needs more than it has is refused before
  // it starts (the arena is mapped without reserve, so it would end in the OOM killer instead).
  const sim::Bytes available = sim::available_host_memory();
  if (capacity_bytes > available) {
    throw sim::InputError(
        "--backend host",
        fmt::format("the run needs {} of device memory, which the host backend takes from this "
                    "machine's memory: {} available",
                    sim::format_bytes(capacity_bytes), sim::format_bytes(available)));
  }
  return std::make_unique<HostDevice>(capacity_bytes, seed, allocator);
}

sim::Link HostBackend::measure_link() const {
  // Copies as the host device makes them: copy-out fills a host vector, copy-in copies back.
  constexpr std::size_t kSmall = 4096;
  constexpr std::size_t kLarge = 1 << 20;
  std::vector<std::byte> source(kLarge, std::byte{1});
  std::vector<std::byte> host;
  auto out_ns = [&](std::size_t n) {
    return median_ns(21, [&] {
      host.assign(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(n));
      host.clear();
      host.shrink_to_fit();
    });
  };
  const double small = out_ns(kSmall);
  const double large = out_ns(kLarge);
  const double ns_per_byte = std::max(large - small, 1.0) / static_cast<double>(kLarge - kSmall);
  sim::Link link;
  link.h2d_bytes_per_s = 1e9 / ns_per_byte;
  link.d2h_bytes_per_s = link.h2d_bytes_per_s;
  link.latency_ns = static_cast<sim::Nanoseconds>(
      std::max(small - ns_per_byte * static_cast<double>(kSmall), 0.0) + 2 * handoff_ns());
  return link;
}

}  // namespace memplan::host_backend
