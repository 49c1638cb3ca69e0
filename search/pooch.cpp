// PoocH (Ito et al., 2019): profiling-based keep / swap / recompute classification.
//
// Note [PoocH in memplan]
// The profile PoocH measures on the GPU (per-op compute time, per-map swap times, when each swap
// ran) is what the simulator predicts, so "profile" here means "simulate":
// 1. Simulate all-swap. L_O = maps whose swap-out is not hidden by compute (the compute stream
//    waited for its copy-out), L_I = maps whose swap-in is not hidden (compute waited for it).
//    Maps in neither stay swapped.
// 2. Enumerate keep/swap for every map of L_I (a binary tree); at each leaf scan L_O \ L_I from
//    the output layer backwards, turning swap into keep while the plan fits; keep the fastest
//    feasible leaf. The enumeration is exhaustive up to kMaxEnumerated maps of L_I (those with the
//    longest stalls); beyond that the remaining maps of L_I stay swapped, which keeps a policy
//    decision within seconds on ResNet-scale workloads (the paper reports two minutes for 300
//    layers; it does not bound the tree).
// 3. For the maps still swapped, r(X) = recompute_overhead(X) / swap_overhead(X), where an
//    overhead is the iteration time with X so treated minus the time with X kept on a device with
//    unlimited memory, the other maps fixed. Maps with r >= 1 stay swapped; the one with the
//    smallest r < 1 whose recomputation fits becomes recompute; repeat until none is left.
// Swap-ins use the lowering's default (issued one op before the first backward use) rather than
// PoocH's "as soon as memory has room"; the search improves prefetch points afterwards.
#include <algorithm>
#include <limits>
#include <memory>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <fmt/core.h>

#include "search/policy.hpp"

namespace memplan::search {
namespace {

constexpr std::size_t kMaxEnumerated = 8;

struct Exposure {
  sim::Nanoseconds swap_out_ns = 0;
  sim::Nanoseconds swap_in_ns = 0;
};

std::vector<Exposure> exposures(const sim::Timeline& timeline, const NetworkView& view) {
  std::vector<Exposure> result(view.feature_maps().size());
  for (const sim::Stall& s : timeline.stalls) {
    if (s.tensor == sim::kNoId) continue;
    const int m = view.map_index(s.tensor);
    if (m < 0) continue;
    auto& e = result[static_cast<std::size_t>(m)];
    if (s.cause == sim::StallCause::kSwapOut) e.swap_out_ns += s.end_ns - s.start_ns;
    if (s.cause == sim::StallCause::kSwapIn) e.swap_in_ns += s.end_ns - s.start_ns;
  }
  return result;
}

sim::Nanoseconds time_or_infinity(const Evaluation& e) {
  return e.feasible ? e.iteration_ns : std::numeric_limits<sim::Nanoseconds>::max();
}

}  // namespace

PoochProfile pooch_profile(Evaluator& evaluator, const NetworkView& view) {
  sim::Plan all_swap = keep_all(view, "pooch");
  for (sim::Decision& d : all_swap.decisions) d.action = sim::Action::kSwap;
  const std::vector<Exposure> exposed = exposures(evaluator.simulate(all_swap), view);
  PoochProfile profile;
  for (std::size_t m = 0; m < exposed.size(); ++m) {
    if (exposed[m].swap_in_ns > 0) {
      profile.swap_in_exposed.push_back(static_cast<int>(m));
    } else if (exposed[m].swap_out_ns > 0) {
      profile.swap_out_only_exposed.push_back(static_cast<int>(m));
    }
  }
  auto& l_i = profile.swap_in_exposed;
  std::stable_sort(l_i.begin(), l_i.end(), [&](int a, int b) {
    return exposed[static_cast<std::size_t>(a)].swap_in_ns >
           exposed[static_cast<std::size_t>(b)].swap_in_ns;
  });
  // From the output layer backwards: maps with later producers first.
  std::stable_sort(profile.swap_out_only_exposed.begin(), profile.swap_out_only_exposed.end(),
                   [&](int a, int b) { return view.producer(a) > view.producer(b); });
  return profile;
}

PolicyDecision decide_pooch(Evaluator& evaluator, const NetworkView& view) {
  // 1. Profile all-swap.
  const PoochProfile profile = pooch_profile(evaluator, view);
  const std::vector<int>& l_i = profile.swap_in_exposed;
  const std::vector<int>& l_o_only = profile.swap_out_only_exposed;
  sim::Plan plan = keep_all(view, "pooch");
  for (sim::Decision& d : plan.decisions) d.action = sim::Action::kSwap;
  const std::size_t n = plan.decisions.size();
  const std::size_t enumerated = std::min(l_i.size(), kMaxEnumerated);

  // 2. Keep/swap enumeration.
  sim::Plan best = plan;
  sim::Nanoseconds best_ns = time_or_infinity(evaluator.evaluate(plan));
  for (std::uint64_t leaf = 0; leaf < (std::uint64_t{1} << enumerated); ++leaf) {
    sim::Plan candidate = plan;
    for (std::size_t k = 0; k < enumerated; ++k) {
      if (((leaf >> k) & 1u) != 0) {
        candidate.decisions[static_cast<std::size_t>(l_i[k])].action = sim::Action::kKeep;
      }
    }
    if (!evaluator.evaluate(candidate).feasible) continue;  // keeping more only needs more memory
    for (int m : l_o_only) {
      auto& d = candidate.decisions[static_cast<std::size_t>(m)];
      d.action = sim::Action::kKeep;
      if (!evaluator.evaluate(candidate).feasible) d.action = sim::Action::kSwap;
    }
    const sim::Nanoseconds t = time_or_infinity(evaluator.evaluate(candidate));
    if (t < best_ns) {
      best_ns = t;
      best = candidate;
    }
  }
  plan = best;

  // 3. Swap -> recompute while r(X) < 1. The r(X) of the swapped maps are independent
  // simulations, run in parallel (one pair of Evaluators per worker thread); the choice scans them
  // in map order, so the result does not depend on the number of threads.
  sim::Machine unlimited = evaluator.machine();
  unlimited.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
  struct Evaluators {
    Evaluators(const sim::Workload& w, const sim::Machine& m, const sim::Machine& u)
        : budget(w, m), reference(w, u) {}
    Evaluator budget;
    Evaluator reference;
  };
  tbb::enumerable_thread_specific<std::unique_ptr<Evaluators>> local([&] {
    return std::make_unique<Evaluators>(evaluator.workload(), evaluator.machine(), unlimited);
  });
  std::vector<double> ratio(n);
  for (;;) {
    const sim::Nanoseconds current = time_or_infinity(evaluator.evaluate(plan));
    tbb::parallel_for(std::size_t{0}, n, [&](std::size_t m) {
      ratio[m] = std::numeric_limits<double>::infinity();
      if (plan.decisions[m].action != sim::Action::kSwap) return;
      Evaluators& ev = *local.local();
      sim::Plan candidate = plan;
      candidate.decisions[m].action = sim::Action::kKeep;
      const sim::Nanoseconds base = ev.reference.evaluate(candidate).iteration_ns;
      const sim::Nanoseconds swap_overhead = current - base;
      if (swap_overhead <= 0) return;  // the swap is free: r is infinite
      candidate.decisions[m].action = sim::Action::kRecompute;
      candidate.decisions[m].prefetch_before = sim::kNoId;
      const Evaluation e = ev.budget.evaluate(candidate);
      if (!e.feasible) return;
      ratio[m] = static_cast<double>(e.iteration_ns - base) / static_cast<double>(swap_overhead);
    });
    int chosen = -1;
    double chosen_r = 1.0;
    for (std::size_t m = 0; m < n; ++m) {
      if (ratio[m] < chosen_r) {
        chosen_r = ratio[m];
        chosen = static_cast<int>(m);
      }
    }
    if (chosen < 0) break;
    plan.decisions[static_cast<std::size_t>(chosen)].action = sim::Action::kRecompute;
    plan.decisions[static_cast<std::size_t>(chosen)].prefetch_before = sim::kNoId;
  }
  for (const auto& ev : local) evaluator.credit(ev->budget.count() + ev->reference.count());
  const auto counts = plan.action_counts();
  std::string note =
      fmt::format("|L_I|={} (enumerated {}), |L_O\\L_I|={}; {} keep / {} swap / {} recompute",
                  l_i.size(), enumerated, l_o_only.size(), counts[0], counts[1], counts[2]);
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
