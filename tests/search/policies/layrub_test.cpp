// Layrub's plan and the step it gives, worked out by hand.
#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "search/policies/policy.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

TEST_CASE("layrub migrates every map and brings it back one op ahead", "[search][layrub]") {
  // f1 1000, f2 800, f3 500, f4 400; h1 1000, h2 3000, h3 2000, h4 1000 ns; 1 byte/ns links.
  const Workload w = fan({1000, 800, 500, 400}, {1000, 3000, 2000, 1000});
  const Machine m = test_machine(Bytes{1} << 30, 1e9);
  Evaluator evaluator(w, m);
  const NetworkView view(w);
  const auto d = find_policy("layrub")->decide(evaluator, view);
  // Every map migrates, with the lowering's default prefetch point (before the op ahead of its
  // first backward use): no explicit prefetch in the plan.
  REQUIRE(d.plan.decisions.size() == 4);
  for (const Decision& decision : d.plan.decisions) {
    CAPTURE(w.tensor(decision.tensor).name);
    CHECK(decision.action == Action::kSwap);
    CHECK(decision.prefetch_before == kNoOp);
  }
  CHECK(d.note == "4 maps migrated");
  // Forward: each map's copy-out (1024 ns) outlasts the next layer's compute, which waits:
  // f1 [0,1000] out a ..2024, f2 [2024,2824] out b ..3848, f3 [3848,4348] out c ..5372,
  // f4 [5372,5772] out d ..6796. Backward: b (for h2) and d (for h1, the first backward op) are
  // fetched before h1, in tensor order: b [6796,7820], d [7820,8844]; h1 [8844,9844]; a before
  // h2 [9844,10868], h2 [9844,12844]; c before h3 [12844,13868], h3 [12844,14844];
  // h4 [14844,15844].
  const Evaluation e = evaluator.cost(d.plan);
  REQUIRE(e.feasible);
  CHECK(e.iteration_ns == 15844);
  // On the device at once: x, the map in use and the one coming back for the next layer, plus
  // gradients: at h2, x + b + g1 + g2 + a (prefetched) = 4096 bytes, against 5632 in-core.
  CHECK(e.peak_bytes == 4096);
  CHECK(incore_peak(w).bytes == 5632);
}
