// Fitting from allocations alone (Evaluator::check_memory, Note [Fitting without the clock]) and
// its incremental form for keep trials (KeepCheck, Note [Keeping a swapped map, incrementally])
// against the engine, on random plans of a zoo network at tight budgets.
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "search/oracle/evaluator.hpp"
#include "search/oracle/keep_check.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "tests/support/sim_helpers.hpp"
#include "zoo/zoo.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

Workload resnet18(std::int64_t batch) {
  memplan::zoo::ZooRequest request;
  request.model = "resnet";
  request.device = "v100-16gb";
  request.options.batch = batch;
  request.options.depth = 18;
  return memplan::zoo::make_workload(request);
}

Bytes in_core_peak(const Workload& w, const NetworkView& view) {
  Evaluator unlimited(w, test_machine(Bytes{1} << 50));
  return unlimited.evaluate(keep_all(view, "test")).peak_reserved_bytes;
}

void same_memory_verdict(const Evaluation& fast, const Evaluation& engine) {
  CHECK(fast.feasible == engine.feasible);
  if (engine.feasible) return;
  CHECK(fast.oom_op == engine.oom_op);
  CHECK(fast.oom_bytes_missing == engine.oom_bytes_missing);
  CHECK(fast.peak_reserved_bytes == engine.peak_reserved_bytes);
}

}  // namespace

TEST_CASE("check_memory, evaluate_if_fits and simulate_if_fits find what the engine finds",
          "[search][evaluator]") {
  const Workload w = resnet18(32);
  const NetworkView view(w);
  const Bytes peak = in_core_peak(w, view);
  std::mt19937 rng(20261126);
  std::uniform_int_distribution<int> action(0, 2);
  int infeasible = 0;
  for (double share : {0.5, 0.7, 0.9}) {
    Evaluator evaluator(w, test_machine(static_cast<Bytes>(share * static_cast<double>(peak))));
    for (int trial = 0; trial < 20; ++trial) {
      CAPTURE(share, trial);
      Plan plan = keep_all(view, "test");
      for (Decision& d : plan.decisions) d.action = static_cast<Action>(action(rng));
      const Evaluation engine = evaluator.evaluate(plan);
      same_memory_verdict(evaluator.check_memory(plan), engine);
      infeasible += engine.feasible ? 0 : 1;
      // The same lowering checked, then timed only when it fits.
      const Evaluation timed = evaluator.evaluate_if_fits(plan);
      same_memory_verdict(timed, engine);
      if (engine.feasible) CHECK(timed.iteration_ns == engine.iteration_ns);
      Evaluation fit;
      const Timeline* timeline = evaluator.simulate_if_fits(plan, &fit);
      same_memory_verdict(fit, engine);
      REQUIRE((timeline != nullptr) == engine.feasible);
      if (timeline != nullptr) CHECK(timeline->iteration_ns == engine.iteration_ns);
    }
  }
  CHECK(infeasible >= 10);  // not all trivial
  CHECK(infeasible <= 55);
}

TEST_CASE("KeepCheck finds what a lowering of the changed plan finds", "[search][evaluator]") {
  // Random keep/swap plans (some swap-ins hoisted), then random sets of their swapped maps kept.
  const Workload w = resnet18(32);
  const NetworkView view(w);
  const Bytes peak = in_core_peak(w, view);
  std::mt19937 rng(20261127);
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  int infeasible = 0;
  int checked = 0;
  for (double share : {0.6, 0.8, 0.95}) {
    const Machine machine = test_machine(static_cast<Bytes>(share * static_cast<double>(peak)));
    Evaluator evaluator(w, machine);
    KeepCheck check(w, machine);
    for (int base = 0; base < 6; ++base) {
      Plan plan = keep_all(view, "test");
      std::vector<int> swapped;
      for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
        if (!chance(0.7)) continue;
        Decision& d = plan.decisions[m];
        d.action = Action::kSwap;
        swapped.push_back(static_cast<int>(m));
        const FeatureMap& fm = view.feature_maps()[m];
        const OpId first_backward = fm.backward_uses.front();
        const OpId after =
            fm.forward_uses.empty() ? view.producer(static_cast<int>(m)) : fm.forward_uses.back();
        if (first_backward - after > 2 && chance(0.3)) d.prefetch_before = after + 1;
      }
      REQUIRE(check.rebase(plan));
      // Maps whose lowering keeps them on the device (nothing between their uses) are the
      // caller's to lower.
      std::erase_if(swapped, [&](int m) { return !check.check({m}).has_value(); });
      for (int trial = 0; trial < 10; ++trial) {
        CAPTURE(share, base, trial);
        std::vector<int> keep;
        const double p = trial < 5 ? 0.05 : 0.3;
        for (int m : swapped)
          if (chance(p)) keep.push_back(m);
        Plan changed = plan;
        for (int m : keep) changed.decisions[static_cast<std::size_t>(m)].action = Action::kKeep;
        const auto fast = check.check(keep);
        if (!fast) continue;  // a map that never leaves the device: the caller lowers
        const Evaluation engine = evaluator.evaluate(changed);
        same_memory_verdict(*fast, engine);
        ++checked;
        infeasible += engine.feasible ? 0 : 1;
      }
    }
  }
  CAPTURE(checked, infeasible);
  CHECK(checked == 180);
  CHECK(infeasible >= 20);
  CHECK(checked - infeasible >= 20);
}

TEST_CASE("a memory check resumed from a checkpoint finds what check_memory finds",
          "[search][evaluator]") {
  // Note [Resuming a memory check]: random keep/swap/recompute plans, then random sets of their
  // swapped maps recomputed (what PoocH's step 3 tries) or prefetched elsewhere, checked from
  // the base plan's checkpoint and from scratch.
  const Workload w = resnet18(32);
  const NetworkView view(w);
  const Bytes peak = in_core_peak(w, view);
  std::mt19937 rng(20261128);
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  int infeasible = 0;
  int checked = 0;
  std::size_t resumed = 0;
  for (double share : {0.5, 0.7, 0.9}) {
    const Machine machine = test_machine(static_cast<Bytes>(share * static_cast<double>(peak)));
    Evaluator evaluator(w, machine);
    Evaluator reference(w, machine);
    for (int base = 0; base < 5; ++base) {
      Plan plan = keep_all(view, "test");
      std::vector<std::size_t> swapped;
      for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
        if (chance(0.2)) plan.decisions[m].action = Action::kRecompute;
        if (!chance(0.6)) continue;
        plan.decisions[m].action = Action::kSwap;
        swapped.push_back(m);
      }
      MemoryCheckpoint checkpoint;
      evaluator.checkpoint(plan, checkpoint);
      REQUIRE_FALSE(checkpoint.empty());
      for (int trial = 0; trial < 12; ++trial) {
        CAPTURE(share, base, trial);
        Plan changed = plan;
        for (std::size_t m : swapped) {
          Decision& d = changed.decisions[m];
          if (chance(trial < 6 ? 0.05 : 0.3)) d = Decision{d.tensor, Action::kRecompute};
          const FeatureMap& fm = view.feature_maps()[m];
          if (d.action == Action::kSwap && chance(0.1))
            d.prefetch_before = fm.backward_uses.front();
        }
        const Evaluation expected = reference.check_memory(changed);
        same_memory_verdict(evaluator.check_memory(changed, checkpoint), expected);
        Evaluation fit;
        const Timeline* timeline = evaluator.simulate_if_fits(changed, checkpoint, &fit);
        same_memory_verdict(fit, expected);
        REQUIRE((timeline != nullptr) == expected.feasible);
        if (timeline != nullptr)
          CHECK(timeline->iteration_ns == reference.evaluate(changed).iteration_ns);
        ++checked;
        infeasible += expected.feasible ? 0 : 1;
      }
    }
    resumed += evaluator.resumed_replays();
  }
  CAPTURE(checked, infeasible, resumed);
  CHECK(infeasible >= 20);
  CHECK(checked - infeasible >= 20);
  CHECK(resumed >= static_cast<std::size_t>(checked));  // most of the two checks per trial
}
