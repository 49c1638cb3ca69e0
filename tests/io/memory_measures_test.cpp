// The two measures behind vDNN's "average memory" figures (docs/reproductions.md): the
// network-wide no-reuse baseline (sim::no_reuse_bytes) and the time average of the live bytes
// (sim::average_live_bytes).
#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "io/timeline_export.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::WorkloadBuilder;

namespace {

// w (1000 B) and x (1000 B) exist before the step; fc reads both and writes y (2000 B) with a
// 500 B workspace in 10 ns; relu writes r over y in place in 10 ns; fc_bwd reads r and writes
// g (3000 B) in 20 ns.
Workload small_step() {
  WorkloadBuilder b;
  const TensorId w = b.parameter("w", 1000);
  const TensorId x = b.input("x", 1000);
  b.op("fc", "linear", Phase::kForward, {x, w}, {{"y", 2000}}, 10, 500);
  const TensorId y = b.workload().ops.back().outputs.front();
  const TensorId r = b.forward_in_place("relu", y, 10);
  b.backward("fc_bwd", {r}, 3000, 20);
  return b.build();
}

}  // namespace

TEST_CASE("the no-reuse baseline holds every buffer and workspace at once", "[sim][liveness]") {
  // w 1000 + x 1000 + y 2000 (r shares it) + g 3000 + fc's workspace 500 = 7500 bytes.
  CHECK(no_reuse_bytes(small_step()) == 7500);
}

TEST_CASE("average live bytes weigh each level of the memory curve by its duration",
          "[sim][timeline]") {
  Timeline tl;
  tl.iteration_ns = 40;
  // 100 B for [0, 10), 300 B for [10, 30), 200 B for [30, 40):
  // (100 x 10 + 300 x 20 + 200 x 10) / 40 = 9000 / 40 = 225.
  tl.memory = {{0, 100, 512}, {10, 300, 1024}, {30, 200, 1024}};
  CHECK(average_live_bytes(tl) == 225);
  // Two points at one time: the first has no width. (100 x 10 + 50 x 0 + ...) is unchanged
  // when a zero-width 50 B level is inserted at 10 ns.
  tl.memory.insert(tl.memory.begin() + 1, MemoryPoint{10, 50, 512});
  CHECK(average_live_bytes(tl) == 225);
  tl.feasible = false;
  CHECK(average_live_bytes(tl) == 0);
}

TEST_CASE("the average of a simulated step lies between its start and its peak",
          "[sim][timeline]") {
  const Workload w = small_step();
  const auto s =
      memplan::test::simulate(w, in_core_plan(w), memplan::test::test_machine(Bytes{1} << 20));
  REQUIRE(s.timeline.feasible);
  // The step takes 10 + 10 + 20 = 40 ns. fc runs in [0, 10) with w, x, y and its workspace:
  // 1000 + 1000 + 2000 + 500 = 4500 B. x dies after fc (its last reader), so relu runs in
  // [10, 20) with w and y (r in place): 3000 B. fc_bwd runs in [20, 40) with w, r and g:
  // 1000 + 2000 + 3000 = 6000 B. Average: (4500 x 10 + 3000 x 10 + 6000 x 20) / 40 = 4875 B.
  CHECK(s.timeline.iteration_ns == 40);
  CHECK(s.timeline.peak_bytes == 6000);
  CHECK(average_live_bytes(s.timeline) == 4875);
}
