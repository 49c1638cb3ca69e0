// The release points of swapped maps (place_releases, Note [Release point] in core/plan.hpp) on the
// fan workload of the policy tests, worked out by hand.
#include <catch2/catch.hpp>

#include "search/policies/schedule.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {
std::string release_op(const Workload& w, const Plan& plan, std::size_t map) {
  const OpId at = plan.decisions[map].release_before;
  return at == kNoOp ? "default" : w.op(at).name;
}
}  // namespace

TEST_CASE("a swapped map is released before the first op that starts after its copy-out ends",
          "[search][schedule]") {
  // In-core schedule: f1 [0,1000] f2 [1000,1800] f3 [1800,2300] f4 [2300,2700] h1 [2700,3700]
  // h2 [3700,6700] h3 [6700,8700] h4 [8700,9700]. a (f1's output) and c (f3's) swapped, 1024
  // bytes each.
  const Workload w = fan({1000, 800, 500, 400}, {1000, 3000, 2000, 1000});
  const NetworkView view(w);
  Plan plan = plan_with(w, {{"f1_out", Action::kSwap}, {"f3_out", Action::kSwap}});
  // 1 byte/ns: a's copy-out [1000,2024] ends during f3, so a goes before f4 (2300). c's waits for
  // a's on the one link and runs [2300,3324], past f4 and h1: c goes before h2 (3700).
  place_releases(plan, view, test_machine(Bytes{1} << 30, 1e9));
  CHECK(release_op(w, plan, 0) == "f4");
  CHECK(release_op(w, plan, 2) == "h2");
  CHECK(release_op(w, plan, 1) == "default");  // kept maps have none
  validate_plan(plan, w, "released");
  // 0.1 byte/ns: a's copy-out takes 10240 ns, past every op before its prefetch point (h2, the op
  // before its first backward use h3): it is released there, where the prefetch reads it back.
  // c's queues behind it, [11240,21480], and is released at its own prefetch point, h3.
  place_releases(plan, view, test_machine(Bytes{1} << 30, 1e8));
  CHECK(release_op(w, plan, 0) == "h2");
  CHECK(release_op(w, plan, 2) == "h3");
  validate_plan(plan, w, "released at the prefetch points");
}
