// Where a plan runs out in the forward pass with some maps evicted (EvictionCheck, Note [Evicting
// in the forward pass]) against Evaluator::check_memory of the lowered plan, on zoo networks with
// in-place ops, concatenations and an optimizer, at tight budgets.
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "search/oracle/evaluator.hpp"
#include "search/oracle/eviction_check.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "tests/support/sim_helpers.hpp"
#include "zoo/zoo.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

TEST_CASE("EvictionCheck finds where a lowering of the evicted plan runs out in the forward pass",
          "[search][evaluator]") {
  int answered = 0;
  int forward_fits = 0;
  for (const char* model : {"resnet18", "densenet121", "mobilenet_v2", "gpt"}) {
    memplan::zoo::ZooRequest request;
    request.model = model;
    request.device = "v100-16gb";
    request.options.batch = std::string(model) == "gpt" ? 2 : 8;
    if (std::string(model) == "gpt") {
      request.options.transformer.layers = 2;
      request.options.transformer.sequence = 128;
      request.options.optimizer = memplan::zoo::Optimizer::kAdam;
    }
    const Workload w = memplan::zoo::make_workload(request);
    const NetworkView view(w);
    const Bytes peak = Evaluator(w, test_machine(Bytes{1} << 50))
                           .evaluate(keep_all(view, "test"))
                           .peak_reserved_bytes;
    std::mt19937 rng(20261126);
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    // The default prefetch point, or (at `early`) one op after the last forward use (possibly a
    // forward op).
    auto prefetch_point = [&](std::size_t m, double early) {
      const FeatureMap& fm = view.feature_maps()[m];
      const OpId after =
          fm.forward_uses.empty() ? view.producer(static_cast<int>(m)) : fm.forward_uses.back();
      return fm.backward_uses.front() - after > 2 && chance(early) ? after + 1 : kNoOp;
    };
    for (double share : {0.3, 0.5, 0.7, 0.9}) {
      const Machine machine = test_machine(static_cast<Bytes>(share * static_cast<double>(peak)));
      Evaluator evaluator(w, machine);
      EvictionCheck check(w, machine);
      for (int base_plan = 0; base_plan < 3; ++base_plan) {
        // Every map kept, or a mix with swaps (some prefetched early) and recomputes.
        Plan base = keep_all(view, "test");
        for (std::size_t m = 0; base_plan > 0 && m < base.decisions.size(); ++m) {
          if (!chance(0.3)) continue;
          Decision& d = base.decisions[m];
          d.action = chance(0.5) ? Action::kSwap : Action::kRecompute;
          if (d.action == Action::kSwap) d.prefetch_before = prefetch_point(m, 0.3);
          d.per_use = d.action == Action::kRecompute && chance(0.3);
        }
        REQUIRE(check.rebase(base));
        for (int trial = 0; trial < 6; ++trial) {
          CAPTURE(model, share, base_plan, trial);
          std::vector<int> evicted;
          Plan plan = base;
          const double p = trial < 2 ? 0.05 : trial < 4 ? 0.3 : 0.7;
          for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
            Decision& d = plan.decisions[m];
            if (d.action != Action::kKeep || !chance(p)) continue;
            evicted.push_back(static_cast<int>(m));
            d.action = chance(0.5) ? Action::kSwap : Action::kRecompute;
            if (d.action == Action::kSwap) d.prefetch_before = prefetch_point(m, 0.02);
          }
          const Evaluation lowered = evaluator.check_memory(plan);
          const auto fast = check.check(plan, evicted);
          if (!fast) {  // the forward part fits, or an eviction is not checked here
            ++forward_fits;
            continue;
          }
          ++answered;
          REQUIRE(!lowered.feasible);
          CHECK(!fast->feasible);
          CHECK(fast->oom_op == lowered.oom_op);
          CHECK(fast->oom_bytes_missing == lowered.oom_bytes_missing);
          CHECK(fast->peak_reserved_bytes == lowered.peak_reserved_bytes);
        }
      }
    }
  }
  CAPTURE(answered, forward_fits);
  CHECK(answered >= 100);
  CHECK(forward_fits >= 30);
}
