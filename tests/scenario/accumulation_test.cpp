// Golden timelines of a step with gradient accumulation: two micro-batches, each a forward and a
// backward pass, then one update (memplan::test::two_micro_batches, as memplan.torch.capture
// records such a step). Each micro-batch's maps are its own backward pass's: they leave the device
// and come back within their micro-batch, and only one micro-batch's maps are on the device at a
// time. Maps of 2048 bytes; 2.048 GB/s links (a map copied in 1000 ns), no copy latency.
#include <catch2/catch.hpp>

#include "core/feature_maps.hpp"
#include "core/liveness.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::kPlenty;
using memplan::test::plan_with;
using memplan::test::span_labels;
using memplan::test::span_of;
using memplan::test::test_machine;
using memplan::test::two_micro_batches;
using Interval = std::pair<Nanoseconds, Nanoseconds>;

TEST_CASE("each micro-batch's feature maps are read by its own backward pass", "[scenario]") {
  const Workload w = two_micro_batches(2048);
  const auto maps = find_feature_maps(w);
  std::vector<std::string> names;
  for (const FeatureMap& m : maps) names.push_back(w.tensor(m.tensor).name);
  CHECK(names == std::vector<std::string>{"f1_out", "h1_out", "f2_out", "h2_out"});
  // Ops: f1 0, h1 1, gh1 2, gf1 3, f2 4, h2 5, gh2 6, gf2 7, sgd 8.
  CHECK(maps[0].forward_uses == std::vector<OpId>{OpId{1}});
  CHECK(maps[0].backward_uses == std::vector<OpId>{OpId{3}});
  CHECK(maps[2].forward_uses == std::vector<OpId>{OpId{5}});
  CHECK(maps[2].backward_uses == std::vector<OpId>{OpId{7}});
  CHECK(last_forward_use(maps[2], w) == OpId{5});
  CHECK(default_prefetch_point(maps[2], w) == OpId{6});  // gh2, the op before gf2
}

TEST_CASE("two micro-batches in core: one micro-batch's maps on the device at a time",
          "[scenario]") {
  const Workload w = two_micro_batches(2048);
  const auto s = memplan::test::simulate(w, plan_with(w, {}), test_machine(4096));
  // x 512 and w 512 from the start. f1 +2048, h1 +512, gh1 +512 = 4096, h1_out freed; gf1 +512 =
  // 4096, then gh1_out and f1_out go: 1536. f2 +2048 (x goes after it), h2 +512, gh2 +512 = 4096;
  // gf2 writes into w's gradient in place. The peak is one micro-batch's, 4096, not two.
  REQUIRE(s.timeline.feasible);
  CHECK(s.timeline.peak_bytes == 4096);
  CHECK(s.timeline.peak_reserved_bytes == 4096);
  CHECK(incore_peak(w).bytes == 4096);
  CHECK(span_of(s, w, StreamId::kCompute, "gf1") == Interval{4000, 5500});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{5500, 6500});
  CHECK(span_of(s, w, StreamId::kCompute, "gf2") == Interval{9500, 11000});
  CHECK(span_of(s, w, StreamId::kCompute, "sgd") == Interval{11000, 11500});
  CHECK(s.timeline.iteration_ns == 11500);
  CHECK_FALSE(memplan::test::simulate(w, plan_with(w, {}), test_machine(4095)).timeline.feasible);
}

TEST_CASE("two micro-batches' swapped maps come back within their own micro-batch", "[scenario]") {
  const Workload w = two_micro_batches(2048);
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"f1_out", Action::kSwap}, {"f2_out", Action::kSwap}}),
      test_machine(kPlenty, 2.048e9));
  // f1 [0,1000]; f1_out's copy-out [1000,2000] under h1 [1000,3000], so its free after h1 does not
  // wait. Its prefetch is issued before gh1 (the op before gf1, its backward use) at 3000 and
  // lands at 4000, when gh1 ends: gf1 [4000,5500]. The second micro-batch the same, 5500 later.
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{3000, 4000});
  CHECK(span_of(s, w, StreamId::kCompute, "gf1") == Interval{4000, 5500});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f2_out") == Interval{6500, 7500});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f2_out") == Interval{8500, 9500});
  CHECK(span_of(s, w, StreamId::kCompute, "gf2") == Interval{9500, 11000});
  CHECK(s.timeline.iteration_ns == 11500);
  CHECK(s.timeline.stall_ns() == 0);
  // A slot is held from its copy-out to the end of its copy-in: f1_out's [1000,4000] and f2_out's
  // [6500,9500] never overlap.
  CHECK(s.timeline.peak_host_bytes == 2048);
  // f1_out comes back before gh1, whose output then makes 4096 as in core.
  CHECK(s.timeline.peak_bytes == 4096);
}

TEST_CASE("two micro-batches' recomputed maps are regenerated in their own backward pass",
          "[scenario]") {
  const Workload w = two_micro_batches(2048);
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"f1_out", Action::kRecompute}, {"f2_out", Action::kRecompute}}),
      test_machine(kPlenty));
  // f1_out goes after h1; gf1 needs it: f1 runs again [4000,5000] from x and w, gf1 [5000,6500].
  // The second micro-batch starts 1000 ns later than in core and does the same: 13500 in all.
  // x, read by the recomputation of f2, stays until then.
  REQUIRE(s.timeline.feasible);
  CHECK(span_labels(s, w, StreamId::kCompute) ==
        std::vector<std::string>{"f1", "h1", "gh1", "f1 (recompute)", "gf1", "f2", "h2", "gh2",
                                 "f2 (recompute)", "gf2", "sgd"});
  CHECK(span_of(s, w, StreamId::kCompute, "f1 (recompute)") == Interval{4000, 5000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2 (recompute)") == Interval{10500, 11500});
  CHECK(s.timeline.iteration_ns == 13500);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kRecompute)] == 2000);
  // f1_out regenerated and gf1_out beside x, w and gh1_out: 4096; in the second micro-batch x, w
  // and w's gradient stay, f2_out and h2_out make 4096 at h2, the regenerated f2_out 4096 at gf2.
  CHECK(s.timeline.peak_bytes == 4096);
}

TEST_CASE("a tensor the next micro-batch's forward pass reads again is no feature map",
          "[scenario]") {
  // Truncated backpropagation through time: micro-batch 1's state h1_out, read by its backward
  // pass, is read by micro-batch 2's forward pass after it (Note [Feature maps of micro-batches]).
  memplan::test::WorkloadBuilder b;
  const TensorId x = b.input("x", 100);
  const TensorId f1 = b.forward("f1", {x}, 1000, 1000);
  const TensorId h1 = b.forward("h1", {f1}, 100, 1000);
  b.backward("gf1", {b.backward("gh1", {h1}, 100, 1000), f1}, 100, 1000);
  const TensorId f2 = b.forward("f2", {x, h1}, 1000, 1000);
  b.backward("gf2", {f2}, 100, 1000);
  const Workload w = b.build();
  std::vector<std::string> names;
  for (const FeatureMap& m : find_feature_maps(w)) names.push_back(w.tensor(m.tensor).name);
  CHECK(names == std::vector<std::string>{"f1_out", "f2_out"});
}
