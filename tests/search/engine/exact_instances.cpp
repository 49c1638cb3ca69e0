#include "tests/search/engine/exact_instances.hpp"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

namespace memplan::test {

using namespace memplan::sim;

namespace {

using Rng = std::mt19937_64;

std::int64_t uniform(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

struct Layer {
  OpId forward = kNoOp;
  std::vector<TensorId> saved;  // what its backward op reads besides the gradient
  TensorId input = kNoTensor;
};

Workload random_layers(Rng& rng, int min_layers, int max_layers) {
  WorkloadBuilder b;
  std::vector<TensorId> outs{b.input("x", uniform(rng, 512, 8192))};
  std::vector<bool> dead(1, false);
  std::vector<bool> out_saved(1, false);  // is outs[i] saved by the layer that wrote it
  std::vector<Layer> layers;
  const int n = static_cast<int>(uniform(rng, min_layers, max_layers));
  for (int i = 0; i < n; ++i) {
    const std::string name = fmt::format("l{}", i);
    const TensorId prev = outs.back();
    const Nanoseconds ns = uniform(rng, 200, 4000);
    Layer layer;
    layer.input = prev;
    const auto kind = uniform(rng, 0, 9);
    const bool can_in_place = i > 0 && !out_saved.back() && !dead.back();
    TensorId out = kNoTensor;
    if (kind <= 1 && can_in_place) {  // in-place ReLU: saves its output, kills its input
      out = b.forward_in_place(name, prev, ns, "relu");
      dead.back() = true;
      layer.saved = {out};
    } else if (kind == 2 && outs.size() >= 3) {  // residual add of an earlier live output
      std::vector<std::size_t> candidates;
      for (std::size_t k = 0; k + 1 < outs.size(); ++k) {
        if (!dead[k]) candidates.push_back(k);
      }
      if (candidates.empty()) {
        out = b.forward(name, {prev}, b.workload().tensor(prev).bytes, ns, "relu");
        layer.saved = {out};
      } else {
        const TensorId skip = outs[candidates[static_cast<std::size_t>(
            uniform(rng, 0, static_cast<std::int64_t>(candidates.size()) - 1))]];
        out = b.forward(name, {prev, skip}, b.workload().tensor(prev).bytes, ns, "add");
      }
    } else {
      static const char* const kTypes[] = {"conv2d", "linear", "max_pool2d", "relu"};
      const std::string type = kTypes[uniform(rng, 0, 3)];
      out = b.forward(name, {prev}, uniform(rng, 512, 8192), ns, type);
      if (type == "relu") {
        layer.saved = {out};
      } else {
        layer.saved = {prev};
      }
    }
    layer.forward = b.last_op();
    outs.push_back(out);
    dead.push_back(false);
    out_saved.push_back(std::find(layer.saved.begin(), layer.saved.end(), out) !=
                        layer.saved.end());
    layers.push_back(layer);
  }
  TensorId grad = kNoTensor;
  for (int i = n - 1; i >= 0; --i) {
    const Layer& layer = layers[static_cast<std::size_t>(i)];
    std::vector<TensorId> reads;
    if (grad != kNoTensor) reads.push_back(grad);
    if (i == n - 1) reads.push_back(outs.back());  // the loss reads the network's output
    for (TensorId t : layer.saved) {
      if (std::find(reads.begin(), reads.end(), t) == reads.end()) reads.push_back(t);
    }
    const Bytes grad_bytes = b.workload().tensor(layer.input).bytes;
    grad = b.backward(fmt::format("l{}_bwd", i), reads, grad_bytes, uniform(rng, 200, 6000),
                      b.workload().op(layer.forward).layer.str());
    b.workload().ops.back().differentiates = layer.forward;
  }
  return b.build();
}

bool fits(const Workload& w, const Plan& plan, const Machine& m) {
  return simulate(w, plan, m).timeline.feasible;
}

}  // namespace

ExactInstance exact_instance(std::uint64_t seed, int min_layers, int max_layers) {
  for (std::uint64_t attempt = 0;; ++attempt) {
    Rng rng(seed * 1000003 + attempt);
    Workload w = random_layers(rng, min_layers, max_layers);
    static const double kBandwidths[] = {0.5e9, 1e9, 2e9, 4e9};
    const double bandwidth = kBandwidths[uniform(rng, 0, 3)];
    const Nanoseconds latency = uniform(rng, 0, 1) == 0 ? 0 : 500;
    const Machine unlimited = test_machine(Bytes{1} << 40, bandwidth, latency);
    Plan late_swaps = swap_all_plan(w);
    const auto maps = find_feature_maps(w);
    for (std::size_t i = 0; i < maps.size(); ++i)
      late_swaps.decisions[i].prefetch_before = maps[i].backward_uses.front();
    const std::vector<Plan> frugal{late_swaps, recompute_all_plan(w)};
    const Bytes incore = simulate(w, in_core_plan(w), unlimited).timeline.peak_reserved_bytes;
    Bytes floor = incore;
    for (const Plan& p : frugal)
      floor = std::min(floor, simulate(w, p, unlimited).timeline.peak_reserved_bytes);
    if (floor >= incore) continue;  // nothing to decide
    const Bytes budget = floor + (incore - floor) * uniform(rng, 0, 999) / 1000;
    const Machine m = test_machine(budget, bandwidth, latency);
    const bool some_fit =
        std::any_of(frugal.begin(), frugal.end(), [&](const Plan& p) { return fits(w, p, m); });
    if (!some_fit) continue;
    return {std::move(w), m};
  }
}

}  // namespace memplan::test
