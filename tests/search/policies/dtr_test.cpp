// DTR's eviction choice on a workload worked out by hand (Note [DTR frozen into a plan]).
#include <algorithm>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "search/policies/policy.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"
#include "zoo/zoo.hpp"

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
        std::vector<Action>{Action::kKeep, Action::kRecompute, Action::kKeep, Action::kKeep});
  CHECK(d.note == "1 maps evicted for recomputation");
  const Evaluation e = Evaluator(w, m).cost(d.plan);
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
  CHECK(actions(d.plan) ==
        std::vector<Action>{Action::kKeep, Action::kRecompute, Action::kRecompute, Action::kKeep});
  CHECK(d.note == "2 maps evicted for recomputation");
  const Evaluation e = Evaluator(w, m).cost(d.plan);
  REQUIRE(e.feasible);
  CHECK(e.iteration_ns == 13000);  // 11700 + f2 + f3
}

TEST_CASE("dtr's cost counts the evicted neighbourhood on both sides of a map", "[search][dtr]") {
  // x -> f1 (100 ns) -> a -> f2 (200) -> b -> f3 (400) -> c -> f4 (800) -> d, each layer reading
  // the previous map; backward reads them all.
  WorkloadBuilder b;
  const auto x = b.input("x", 1024);
  const auto a = b.forward("f1", {x}, 1024, 100);
  const auto bb = b.forward("f2", {a}, 1024, 200);
  const auto c = b.forward("f3", {bb}, 1024, 400);
  const auto d = b.forward("f4", {c}, 1024, 800);
  const auto g4 = b.backward("g4", {d}, 512, 100);
  const auto g3 = b.backward("g3", {g4, c}, 512, 100);
  const auto g2 = b.backward("g2", {g3, bb}, 512, 100);
  b.backward("g1", {g2, a}, 512, 100);
  const Workload w = b.build();
  const NetworkView view(w);
  Plan plan = keep_all(view, "dtr");
  REQUIRE(plan.decisions.size() == 4);
  // Nothing evicted: a map costs its producer.
  CHECK(DtrCosts(view, plan).cost(1) == 200);
  // a and c evicted: regenerating b needs a (f1), and c needs b to come back (f3):
  // 200 + 100 + 400. d is kept, so the walk stops at c.
  plan.decisions[0].action = Action::kRecompute;
  plan.decisions[2].action = Action::kRecompute;
  DtrCosts costs(view, plan);
  CHECK(costs.cost(1) == 700);
  // d evicted too: it is reached through c: + 800.
  plan.decisions[3].action = Action::kRecompute;
  CHECK(DtrCosts(view, plan).cost(1) == 1500);
  costs.evict(3);  // the same, by a union into c's component
  CHECK(costs.cost(1) == 1500);
  // From d's side with only c evicted: f4 + f3; c's other neighbour b is kept.
  plan.decisions[0].action = Action::kKeep;
  plan.decisions[3].action = Action::kKeep;
  DtrCosts from_d(view, plan);
  CHECK(from_d.cost(3) == 1200);
  // The score divides by bytes and staleness. In-core: f1 [0,100] f2 [100,300] f3 [300,700]
  // f4 [700,1500] g4 [1500,1600] g3 [1600,1700] g2 (op 6) from 1700. At g2, d was last used by g4
  // (ended 1600): h(d) = 1200 / (1024 * 100).
  const InCoreSchedule schedule = in_core_schedule(w);
  CHECK(dtr_score(view, from_d, schedule, 3, OpId{6}) == Approx(1200.0 / (1024.0 * 100.0)));
}

namespace {

// The DTR paper's neighbourhood, walked: the evicted maps reachable from `map` through evicted
// maps, each step to the evicted inputs of a map's producer or the evicted outputs of the forward
// ops that read it; each counts its producer's time once, `map` too.
Nanoseconds walked_cost(const NetworkView& view, const Plan& plan, int map) {
  const Workload& w = view.workload();
  std::vector<char> seen(view.feature_maps().size(), 0);
  std::vector<int> stack{map};
  seen[static_cast<std::size_t>(map)] = 1;
  Nanoseconds cost = 0;
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    cost += w.op(view.producer(m)).duration_ns;
    auto visit = [&](TensorId t) {
      const int n = view.map_index(t);
      if (n < 0 || seen[static_cast<std::size_t>(n)] != 0 ||
          plan.decisions[static_cast<std::size_t>(n)].action != Action::kRecompute)
        return;
      seen[static_cast<std::size_t>(n)] = 1;
      stack.push_back(n);
    };
    for (TensorId t : w.op(view.producer(m)).inputs) visit(t);
    for (OpId use : view.feature_maps()[static_cast<std::size_t>(m)].forward_uses) {
      for (TensorId t : w.op(use).outputs) visit(t);
    }
  }
  return cost;
}

}  // namespace

TEST_CASE("dtr's costs kept by union equal the walked neighbourhood as maps are evicted",
          "[search][dtr][property]") {
  // ResNet-18 and a DenseNet (concatenations: a map read by many forward ops), maps evicted in a
  // random order; after each eviction every kept map's cost is the walk's.
  for (const char* model : {"resnet18", "densenet121"}) {
    memplan::zoo::ZooRequest request;
    request.model = model;
    request.device = "v100-16gb";
    request.options.batch = 2;
    const Workload w = memplan::zoo::make_workload(request);
    const NetworkView view(w);
    for (unsigned seed = 1; seed <= 3; ++seed) {
      CAPTURE(model, seed);
      Plan plan = keep_all(view, "test");
      DtrCosts costs(view, plan);
      std::vector<int> order(plan.decisions.size());
      for (std::size_t m = 0; m < order.size(); ++m) order[m] = static_cast<int>(m);
      std::mt19937 rng(seed);
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(order.size() * 2 / 3);
      for (std::size_t k = 0; k < order.size(); ++k) {
        plan.decisions[static_cast<std::size_t>(order[k])].action = Action::kRecompute;
        costs.evict(order[k]);
        if (k % 8 != 0) continue;
        for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
          if (plan.decisions[m].action != Action::kKeep) continue;
          REQUIRE(costs.cost(static_cast<int>(m)) == walked_cost(view, plan, static_cast<int>(m)));
        }
      }
    }
  }
}
