#pragma once
// Finite-difference checks for the host kernels: for L = Σ y·r with a fixed random r, the
// backward kernel's gradient must match (L(x + h) − L(x − h)) / 2h element by element.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace memplan::test {

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Largest |numeric − analytic| / max(1, |numeric|) over all elements of `x`.
/// `forward(x)` returns y; `analytic` is dL/dx computed by the kernel under test with dy = r.
inline double max_gradient_error(
    std::vector<float> x, const std::vector<float>& r,
    const std::function<std::vector<float>(const std::vector<float>&)>& forward,
    const std::vector<float>& analytic, float h = 1e-2f) {
  auto loss = [&](const std::vector<float>& in) {
    const auto y = forward(in);
    double l = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
    return l;
  };
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double plus = loss(x);
    x[i] = saved - h;
    const double minus = loss(x);
    x[i] = saved;
    const double numeric = (plus - minus) / (2.0 * h);
    worst = std::max(worst, std::fabs(numeric - analytic[i]) / std::max(1.0, std::fabs(numeric)));
  }
  return worst;
}

}  // namespace memplan::test
