#include "runtime/host_speed.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/host_ops.hpp"

namespace memplan::runtime {

sim::BytesPerSecond measure_host_op_bandwidth(sim::Bytes parameter_bytes, int runs) {
  const auto n = std::max<sim::Bytes>(parameter_bytes / 4, 1);
  std::vector<float> w(static_cast<std::size_t>(n), 1.0f);
  std::vector<float> g(static_cast<std::size_t>(n), 1e-3f);
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  std::vector<double> seconds;
  for (int k = 0; k <= std::max(runs, 1); ++k) {
    const auto start = std::chrono::steady_clock::now();
    sgd_momentum_update(n, 0.01f, 0.9f, 0.0f, w.data(), g.data(), v.data());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (k > 0) seconds.push_back(took.count());  // the first run pages the arrays in
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = std::max(seconds[seconds.size() / 2], 1e-9);
  // Parameters, gradients and momenta read; parameters and momenta written (Machine::host_op_ns).
  return 5.0 * static_cast<double>(n * 4) / median;
}

}  // namespace memplan::runtime
