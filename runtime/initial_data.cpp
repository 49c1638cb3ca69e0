#include "runtime/initial_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/backend_error.hpp"

namespace memplan::runtime {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1), a function of (seed, tensor, index) only.
float uniform(std::uint64_t seed, sim::TensorId t, std::int64_t i) {
  const std::uint64_t h =
      splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(t) * 0x100000001b3ULL +
                                   static_cast<std::uint64_t>(i)));
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ULL << 23) - 1.0);
}

std::int64_t element_count(const sim::Tensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  return n;
}

// The range of an int64 input: the classes of the loss it labels (the last axis of the logits),
// or the rows of the table an embedding looks it up in; the smallest when it has several uses.
std::int64_t label_classes(const sim::Workload& w, sim::TensorId labels) {
  std::int64_t range = 0;
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kForward || op.inputs.size() != 2) continue;
    std::int64_t r = 0;
    if (op.layer == sim::Layer::kSoftmaxCrossEntropy && op.inputs[1] == labels) {
      r = w.tensor(op.inputs[0]).shape.back();
    } else if (op.layer == sim::Layer::kEmbedding && op.inputs[0] == labels) {
      r = w.tensor(op.inputs[1]).shape.front();
    }
    if (r > 0) range = range == 0 ? r : std::min(range, r);
  }
  return std::max<std::int64_t>(range, 1);
}

}  // namespace

void fill_initial_data(const sim::Workload& workload, const sim::Tensor& t, std::uint64_t seed,
                       std::byte* out) {
  const std::int64_t n = element_count(t);
  if (t.kind == sim::TensorKind::kOptimizerState) {
    std::memset(out, 0, static_cast<std::size_t>(t.bytes));
  } else if (t.dtype == "int64") {
    const std::int64_t classes = label_classes(workload, t.id);
    auto* labels = reinterpret_cast<std::int64_t*>(out);
    for (std::int64_t i = 0; i < n; ++i) {
      const float u = uniform(seed, t.id, i);  // [-1, 1)
      labels[i] = std::min<std::int64_t>(
          classes - 1, static_cast<std::int64_t>((u + 1.0f) * 0.5f * static_cast<float>(classes)));
    }
  } else if (t.dtype == "float32" || t.dtype.empty()) {
    float scale = 1.0f;
    if (t.kind == sim::TensorKind::kParameter && !t.shape.empty()) {
      // Weights are [out, in...] (linear [out, in], conv [K, C/groups, kernel...]).
      const std::int64_t fan_in = n / std::max<std::int64_t>(t.shape[0], 1);
      scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(fan_in, 1)));
    }
    auto* x = reinterpret_cast<float*>(out);
    for (std::int64_t i = 0; i < n; ++i) x[i] = scale * uniform(seed, t.id, i);
  } else {
    throw BackendError("tensor '" + t.name + "': no initial data for dtype " + t.dtype);
  }
}

}  // namespace memplan::runtime
