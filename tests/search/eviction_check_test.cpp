// Where a plan runs out in the forward pass with some maps evicted (EvictionCheck, Note [Evicting
// in the forward pass]) against Evaluator::check_memory of the lowered plan, on zoo networks with
// in-place ops, concatenations and an optimizer, at tight budgets.
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "search/evaluator.hpp"
#include "search/eviction_check.hpp"
#include "search/network_view.hpp"
#include "search/policy.hpp"
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
    const Plan kept = keep_all(view, "test");
    const Bytes peak =
        Evaluator(w, test_machine(Bytes{1} << 50)).evaluate(kept).peak_reserved_bytes;
    std::mt19937 rng(20261126);
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    for (double share : {0.3, 0.5, 0.7, 0.9}) {
      const Machine machine = test_machine(static_cast<Bytes>(share * static_cast<double>(peak)));
      Evaluator evaluator(w, machine);
      EvictionCheck check(w, machine);
      REQUIRE(check.rebase(kept));
      for (int trial = 0; trial < 12; ++trial) {
        CAPTURE(model, share, trial);
        std::vector<int> evicted;
        Plan plan = kept;
        const double p = trial < 4 ? 0.05 : trial < 8 ? 0.3 : 0.7;
        for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
          if (!chance(p)) continue;
          evicted.push_back(static_cast<int>(m));
          plan.decisions[m].action = Action::kRecompute;
        }
        const Evaluation lowered = evaluator.check_memory(plan);
        const auto fast = check.check(evicted);
        if (!fast) {  // the forward part fits (or a map's regeneration is not checked here)
          forward_fits += 1;
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
  CAPTURE(answered, forward_fits);
  CHECK(answered >= 60);
  CHECK(forward_fits >= 30);
}
