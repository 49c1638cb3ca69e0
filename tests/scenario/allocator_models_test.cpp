// The two allocator models on one hand-built step (core/allocator_model.hpp): a freed 12 MiB map
// leaves a hole too small for a later 14 MiB one. One contiguous arena runs out there; PyTorch's
// caching allocator gives the cached 12 MiB segment back to the driver and fits.
#include <catch2/catch.hpp>

#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::test_machine;
using memplan::test::WorkloadBuilder;

namespace {
constexpr Bytes kMiB = Bytes{1} << 20;

// f1 (1000 ns) writes a (12 MiB), f2 (2000) reads it and writes b (16 MiB), f3 (3000) reads b and
// writes c (14 MiB), g3 (1000) reads c. a is dead after f2, b after f3.
Workload hole_too_small() {
  WorkloadBuilder builder;
  const auto x = builder.input("x", 512);
  const auto a = builder.forward("f1", {x}, 12 * kMiB, 1000);
  const auto b = builder.forward("f2", {a}, 16 * kMiB, 2000);
  const auto c = builder.forward("f3", {b}, 14 * kMiB, 3000);
  builder.backward("g3", {c}, 512, 1000);
  return builder.build();
}
}  // namespace

TEST_CASE("a hole too small: the arena runs out, the caching allocator gives a segment back",
          "[scenario][allocator]") {
  const Workload w = hole_too_small();
  Machine machine = test_machine(40 * kMiB);

  // Arena: x at [0, 512), a at [512, 12 MiB + 512), b above it to 28 MiB + 512. After f2, a and
  // x are free: one hole of 12 MiB + 512 at 0, and 12 MiB - 512 above b. c (14 MiB) fits neither.
  machine.allocator = AllocatorModel::kArena;
  const auto arena = memplan::test::simulate(w, in_core_plan(w), machine);
  REQUIRE_FALSE(arena.timeline.feasible);
  REQUIRE(arena.timeline.oom.has_value());
  CHECK(w.op(arena.timeline.oom->op).name == "f3");
  CHECK(arena.timeline.oom->requested_bytes == 14 * kMiB);
  CHECK(arena.timeline.oom->largest_free_block == 12 * kMiB + 512);

  // Caching: x takes a 2 MiB small segment, a and b segments of their size (30 MiB held). After
  // f2 a's and x's segments are cached without a live block. c finds no cached block of 14 MiB,
  // and 30 + 14 > 40: both cached segments go back, and 16 + 14 = 30 MiB fits. g3's 512-byte
  // gradient then takes a new 2 MiB segment beside b's (cached, 16 MiB) and c's: 32 MiB, the
  // peak. Live bytes peak at f3: b and c, 30 MiB.
  machine.allocator = AllocatorModel::kCaching;
  const auto caching = memplan::test::simulate(w, in_core_plan(w), machine);
  REQUIRE(caching.timeline.feasible);
  CHECK(caching.timeline.peak_reserved_bytes == 32 * kMiB);
  CHECK(caching.timeline.peak_bytes == 30 * kMiB);
  CHECK(caching.timeline.iteration_ns == 7000);

  // With memory to spare nothing is given back: 2 + 12 + 16 + 14 MiB held at f3.
  machine.memory_bytes = 1024 * kMiB;
  const auto spare = memplan::test::simulate(w, in_core_plan(w), machine);
  REQUIRE(spare.timeline.feasible);
  CHECK(spare.timeline.peak_reserved_bytes == 44 * kMiB);
  CHECK(capacity_to_run(spare.program, machine) == 44 * kMiB);
}
