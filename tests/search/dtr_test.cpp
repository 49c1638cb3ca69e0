// DTR's eviction choice on a workload worked out by hand (Note [DTR frozen into a plan]).
#include <catch2/catch.hpp>

#include "search/policy.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// f1 3000, f2 800, f3 500, f4 400 ns; h1 1000, h2 3000, h3 2000, h4 1000 ns. In-core schedule:
// f1 [0,3000] f2 [3000,3800] f3 [3800,4300] f4 [4300,4700] h1 [4700,5700] h2 [5700,8700] ...
// Every map is 1024 bytes and regenerated from x alone (its evicted neighbourhood is empty), so
// h = producer time / (1024 * time since last use).
Workload dtr_fan() {
  return fan({3000, 800, 500, 400}, {1000, 3000, 2000, 1000});
}

PolicyDecision dtr(const Workload& w, const Machine& m) {
  Evaluator evaluator(w, m);
  const NetworkView view(w);
  return find_policy("dtr")->decide(evaluator, view);
}

std::array<Action, 4> actions(const Plan& plan) {
  REQUIRE(plan.decisions.size() == 4);
  return {plan.decisions[0].action, plan.decisions[1].action, plan.decisions[2].action,
          plan.decisions[3].action};
}

}  // namespace

TEST_CASE("dtr evicts the map with the smallest cost / (bytes x staleness)", "[search][dtr]") {
  const Workload w = dtr_fan();
  // 5120 bytes: in-core runs out at h1 (x, a, b, c, d fill the device; g1 has no room). Resident
  // and not read by h1: a, b, c. At h1's in-core start (4700): staleness a 1700, b 900, c 400;
  // cost a 3000, b 800, c 500: h (x1024) a 1.76, b 0.89, c 1.25. DTR evicts b: neither the
  // cheapest (c) nor the stalest (a). Regenerated before h2, b then fits beside h2's gradients.
  const Machine m = test_machine(5120);
  const auto d = dtr(w, m);
  CHECK(actions(d.plan) ==
        std::array<Action, 4>{Action::kKeep, Action::kRecompute, Action::kKeep, Action::kKeep});
  CHECK(d.note == "1 maps evicted for recomputation");
  const Evaluation e = Evaluator(w, m).evaluate(d.plan);
  REQUIRE(e.feasible);
  CHECK(e.iteration_ns == 12500);  // 11700 ns of compute plus f2 once more
}

TEST_CASE("dtr evicts again where the frozen plan runs out next", "[search][dtr]") {
  const Workload w = dtr_fan();
  // 4608 bytes: in-core runs out at f4 (d has no room). At 4300: staleness a 1300, b 500, c 0
  // (taken as 1 ns): h a 2.31, b 1.6, c 500: b goes. Then b, regenerated before h2, leaves no
  // room for g2: out of memory at h2 (in-core start 5700), where a and c are resident and not
  // read: a 3000 / 2700 = 1.11, c 500 / 1400 = 0.36: c goes, although a is staler. Then it fits.
  const Machine m = test_machine(4608);
  const auto d = dtr(w, m);
  CHECK(actions(d.plan) == std::array<Action, 4>{Action::kKeep, Action::kRecompute,
                                                 Action::kRecompute, Action::kKeep});
  CHECK(d.note == "2 maps evicted for recomputation");
  const Evaluation e = Evaluator(w, m).evaluate(d.plan);
  REQUIRE(e.feasible);
  CHECK(e.iteration_ns == 13000);  // 11700 + f2 + f3
}
