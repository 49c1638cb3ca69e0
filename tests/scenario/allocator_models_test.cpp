// The two allocator models on one hand-built step (core/allocator_model.hpp): a freed 12 MiB map
// leaves a hole too small for a later 14 MiB one. One contiguous arena runs out there; PyTorch's
// caching allocator gives the cached 12 MiB segment back to the driver and fits.
#include <catch2/catch.hpp>

#include "io/timeline_export.hpp"
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

TEST_CASE("the caching allocator's out-of-memory line says its pool and the segment it lacks",
          "[scenario][allocator]") {
  // x (1 MiB) and y (768 KiB) share a 2 MiB small segment, a (4 MiB) takes a 20 MiB one whose
  // 16 MiB rest stays cached in the large pool; b (1 MiB, small) finds no small block that
  // large (256 KiB) and its new 2 MiB segment has 1 MiB of the 23: 1 MiB missing. It said
  // "largest free block 16.00 MiB, -15.00 MiB missing" (the large pool's block, which never
  // serves a small request).
  WorkloadBuilder builder;
  const auto x = builder.input("x", kMiB);
  const auto y = builder.input("y", 3 * kMiB / 4);
  const auto a = builder.forward("f1", {x, y}, 4 * kMiB, 1000);
  const auto b = builder.forward("f2", {a, x, y}, kMiB, 1000);
  builder.backward("g2", {b}, 512, 1000);
  const Workload w = builder.build();
  Machine machine = test_machine(23 * kMiB);
  machine.allocator = AllocatorModel::kCaching;
  const auto run = memplan::test::simulate(w, in_core_plan(w), machine);
  REQUIRE_FALSE(run.timeline.feasible);
  const OomReport& oom = *run.timeline.oom;
  CHECK(oom.bytes_missing == kMiB);
  CHECK(oom_to_text(oom, run.program, w) ==
        "out of device memory at op 'f2' (t=1.000 us): alloc f2_out needs 1.00 MiB "
        "(1048576 B, up to 1 MiB: the small pool), which has no cached block that large "
        "(largest 256.00 KiB), and a new 2.00 MiB small segment (PyTorch's for every request up "
        "to 1 MiB) does not fit in the 1.00 MiB the capacity leaves beside the segments holding "
        "live blocks: 1.00 MiB missing (the large pool's cached 16.00 MiB serves requests over "
        "1 MiB only); live 5.75 MiB of 23.00 MiB (activation 4.00 MiB, input 1.75 MiB)");

  // A request over 1 MiB and under 10 MiB takes a 20 MiB segment: with only the 2 MiB small
  // segment held, 21 MiB leave 19 MiB for it: 1 MiB missing (it said "-15.00 MiB").
  machine.memory_bytes = 21 * kMiB;
  const auto large = memplan::test::simulate(w, in_core_plan(w), machine);
  REQUIRE_FALSE(large.timeline.feasible);
  CHECK(large.timeline.oom->bytes_missing == kMiB);
  CHECK(oom_to_text(*large.timeline.oom, large.program, w) ==
        "out of device memory at op 'f1' (t=0.000 us): alloc f1_out needs 4.00 MiB (4194304 B, "
        "over 1 MiB: the large pool), which has no cached block that large (none cached), and a "
        "new 20.00 MiB segment (PyTorch's for every request over 1 MiB and under 10 MiB) does "
        "not fit in the 19.00 MiB the capacity leaves beside the segments holding live blocks: "
        "1.00 MiB missing; live 1.75 MiB of 21.00 MiB (input 1.75 MiB)");
}
