#include "tests/property/random_graphs.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/plan.hpp"
#include "tests/support/workload_builder.hpp"

namespace memplan::test {

using namespace memplan::sim;

std::int64_t uniform(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

Workload random_workload(Rng& rng) {
  WorkloadBuilder b;
  std::vector<TensorId> live;  // forward tensors later ops may read
  live.push_back(b.input("x", uniform(rng, 1, 4000)));
  std::vector<TensorId> params;
  const int layers = static_cast<int>(uniform(rng, 1, 14));
  struct Layer {
    std::vector<TensorId> reads;
    TensorId out;
  };
  std::vector<Layer> layers_done;
  std::vector<bool> dead;  // overwritten in place: nobody may read it again
  auto is_dead = [&](TensorId t) {
    return static_cast<std::size_t>(t) < dead.size() && dead[static_cast<std::size_t>(t)];
  };
  for (int i = 0; i < layers; ++i) {
    const std::string name = fmt::format("f{}", i);
    const TensorId last = live.back();
    const bool can_in_place = b.workload().tensor(last).kind == TensorKind::kActivation;
    if (can_in_place && uniform(rng, 0, 3) == 0) {
      const TensorId out = b.forward_in_place(name, last, uniform(rng, 1, 3000));
      dead.resize(b.workload().tensors.size(), false);
      dead[static_cast<std::size_t>(last)] = true;
      live.back() = out;
      layers_done.push_back({{last}, out});
      continue;
    }
    std::vector<TensorId> reads = {live.back()};
    if (live.size() > 1 && uniform(rng, 0, 2) == 0) {
      const TensorId skip = live[static_cast<std::size_t>(
          uniform(rng, 0, static_cast<std::int64_t>(live.size()) - 2))];
      if (std::find(reads.begin(), reads.end(), skip) == reads.end()) reads.push_back(skip);
    }
    if (uniform(rng, 0, 1) == 0) {
      params.push_back(b.parameter(fmt::format("w{}", i), uniform(rng, 1, 2000)));
      reads.push_back(params.back());
    }
    static const char* const kLayers[] = {"conv2d", "linear", "max_pool2d"};
    b.op(name, kLayers[uniform(rng, 0, 2)], Phase::kForward, reads,
         {{fmt::format("{}_out", name), uniform(rng, 1, 6000)}}, uniform(rng, 1, 5000),
         uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 3000) : 0);
    const TensorId out = b.workload().ops.back().outputs[0];
    live.push_back(out);
    layers_done.push_back({reads, out});
  }
  dead.resize(b.workload().tensors.size(), false);
  // Backward in reverse: each reads the running gradient and some of its layer's live tensors.
  TensorId grad =
      b.backward("loss_bwd", {live.back()}, uniform(rng, 1, 2000), uniform(rng, 1, 2000));
  for (int i = layers - 1; i >= 0; --i) {
    std::vector<TensorId> reads = {grad};
    auto consider = [&](TensorId t) {
      if (is_dead(t) || std::find(reads.begin(), reads.end(), t) != reads.end()) return;
      if (uniform(rng, 0, 2) != 0) reads.push_back(t);
    };
    for (TensorId t : layers_done[static_cast<std::size_t>(i)].reads) consider(t);
    consider(layers_done[static_cast<std::size_t>(i)].out);
    grad = b.backward(fmt::format("g{}", i), reads, uniform(rng, 1, 4000), uniform(rng, 1, 5000));
  }
  if (!params.empty()) {
    std::vector<TensorId> reads = params;
    reads.push_back(grad);
    const Nanoseconds update_ns = uniform(rng, 1, 2000);
    // In half the workloads the update makes temporaries first (Adam's sqrt and denominator),
    // from a generator of its own so that the draws above and after stay what they were: one or
    // two chains from the gradient, each op writing over the last in place or making a new one,
    // some never read, the last of a chain mostly read by the update.
    Rng temps(workload_fingerprint(b.workload()));
    if (uniform(temps, 0, 1) == 0) {
      const int chains = static_cast<int>(uniform(temps, 1, 2));
      for (int c = 0; c < chains; ++c) {
        TensorId last = grad;
        const int count = static_cast<int>(uniform(temps, 1, 4));
        for (int k = 0; k < count; ++k) {
          const bool in_place = last != grad && uniform(temps, 0, 1) == 0;
          const Bytes bytes = in_place ? b.workload().tensor(last).bytes : uniform(temps, 1, 3000);
          const std::string name = fmt::format("u{}_{}", c, k);
          b.op(name, "generic", Phase::kUpdate, {last}, {{name + "_out", bytes}},
               uniform(temps, 1, 500));
          Tensor& out = b.workload().tensors.back();
          out.kind = TensorKind::kActivation;  // as memplan.torch records what update ops write
          if (in_place) out.in_place_of = last;
          if (in_place || uniform(temps, 0, 2) != 0) last = out.id;  // else never read again
        }
        if (last != grad && uniform(temps, 0, 3) != 0) reads.push_back(last);
      }
    }
    b.op("update", "sgd", Phase::kUpdate, reads, {}, update_ns);
  }
  return b.build();
}

Plan random_plan(const Workload& w, Rng& rng) {
  Plan plan = in_core_plan(w);
  const auto maps = find_feature_maps(w);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    Decision& d = plan.decisions[i];
    switch (uniform(rng, 0, 4)) {
      case 0:
        d.action = Action::kKeep;
        break;
      case 1:
      case 2: {
        d.action = Action::kSwap;
        const OpId drop = last_forward_use(maps[i], w);
        if (uniform(rng, 0, 1) == 0)
          d.prefetch_before =
              op_id(uniform(rng, value(drop) + 1, value(maps[i].backward_uses.front())));
        // Half the swaps free their device copy later than the last forward use, up to the
        // prefetch point (Note [Release point]).
        if (uniform(rng, 0, 1) == 0) {
          const OpId prefetch =
              d.prefetch_before != kNoOp ? d.prefetch_before : default_prefetch_point(maps[i], w);
          d.release_before = op_id(uniform(rng, value(drop) + 1, value(prefetch)));
        }
        break;
      }
      case 3:
        d.action = Action::kRecompute;
        break;
      default:
        d.action = Action::kEncode;
        // Lossless Gist schemes where the map allows them, else a lossy one.
        d.encoding = static_cast<Encoding>(uniform(rng, 1, 5));
        if (!decision_problem(d, maps[i], w).empty()) d.encoding = Encoding::kFp16;
        break;
    }
  }
  // A map kept lossily (binarize, fp16/fp10/fp8) may not feed a forward op that a recompute
  // re-runs (validate_plan says so); such a draw keeps its lossy maps instead.
  try {
    validate_plan(plan, w, "random plan");
  } catch (const InputError&) {
    for (Decision& d : plan.decisions) {
      if (d.action == Action::kEncode && d.encoding != Encoding::kSparse) {
        d.action = Action::kKeep;
        d.encoding = Encoding::kNone;
      }
    }
    validate_plan(plan, w, "random plan");
  }
  // Host placement (Note [Host placement] in core/plan.hpp) in a third of the plans, from a
  // generator of its own so that the draws above and after stay what they were.
  Rng place(workload_fingerprint(w));
  if (uniform(place, 0, 2) == 0) {
    for (TensorKind kind : {TensorKind::kParameter, TensorKind::kInput, TensorKind::kGradient}) {
      for (TensorId t : host_placeable(w, kind)) {
        if (uniform(place, 0, 1) == 0) plan.host_tensors.push_back(t);
      }
    }
    std::sort(plan.host_tensors.begin(), plan.host_tensors.end());
    if (uniform(place, 0, 1) == 0) {
      set_host_placement(plan, w, TensorKind::kGradient, true);
      plan.host_update = true;
      plan.host_update = host_update_problem(plan, w).empty();
    }
    // Half the groups of their uses prefetched at a point of their window other than the
    // default (Plan::host_prefetches), drawn after the placement so that it stays what it was.
    for (TensorId t : plan.host_tensors) {
      for (const HostUseGroup& g : host_use_groups(t, plan.host_update, w)) {
        if (uniform(place, 0, 1) == 0) continue;
        const OpId at = op_id(uniform(place, value(g.earliest_prefetch), value(g.first_use)));
        if (at != g.default_prefetch) plan.host_prefetches.push_back({t, g.first_use, at});
      }
    }
    validate_plan(plan, w, "random plan");
  }
  return plan;
}

}  // namespace memplan::test
