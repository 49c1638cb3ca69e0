// Golden timelines: tiny hand-built workloads whose exact timeline is worked out by hand in the
// comments (1 GB/s links = 1 byte per nanosecond, no copy latency, unless a test says otherwise).
#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::kPlenty;
using memplan::test::plan_with;
using memplan::test::span_labels;
using memplan::test::span_of;
using memplan::test::test_machine;
using memplan::test::WorkloadBuilder;
using Interval = std::pair<Nanoseconds, Nanoseconds>;

namespace {

// f1 (1000 ns) -> f2 (2000) -> f3 (3000); backward g3 (1000), g2 (2000), g1 (1500).
// f1_out (`a_bytes`) is read by f2 and g1: a long gap in which it can live on the host.
Workload chain3(Bytes a_bytes) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, a_bytes, 1000);
  const auto bb = b.forward("f2", {a}, 100, 2000);
  const auto c = b.forward("f3", {bb}, 100, 3000);
  const auto gc = b.backward("g3", {c}, 100, 1000);
  const auto gb = b.backward("g2", {gc, bb}, 100, 2000);
  b.backward("g1", {gb, a}, 100, 1500);
  return b.build();
}
}  // namespace

TEST_CASE("a swap completely hidden by compute", "[scenario]") {
  const Workload w = chain3(1000);
  const auto s =
      memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), test_machine(kPlenty));
  // f1 [0,1000]; the copy-out runs during f2 [1000,3000] and ends at 2000, before f2 ends, so the
  // buffer is freed without waiting. The prefetch is issued before g2 (the op before g1, the first
  // backward use), at 7000, and lands at 8000, before g2 ends at 9000.
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kCompute, "f1") == Interval{0, 1000});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 3000});
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{3000, 6000});
  CHECK(span_of(s, w, StreamId::kCompute, "g3") == Interval{6000, 7000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{7000, 8000});
  CHECK(span_of(s, w, StreamId::kCompute, "g2") == Interval{7000, 9000});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{9000, 10500});
  CHECK(s.timeline.iteration_ns == 10500);
  CHECK(s.timeline.iteration_ns == s.timeline.op_compute_ns);
  CHECK(s.timeline.stall_ns() == 0);
  CHECK(s.timeline.stalls.empty());
  CHECK(s.timeline.peak_host_bytes == 1000);
}

TEST_CASE("a swap that is not hidden stalls compute twice", "[scenario]") {
  const Workload w = chain3(5000);
  const auto s =
      memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), test_machine(kPlenty));
  // The 5000-byte copy-out [1000,6000] outlasts f2 [1000,3000]: compute waits 3000 ns before it can
  // free f1_out. The copy-in [10000,15000] outlasts g2 [10000,12000]: g1 waits 3000 ns.
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 6000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 3000});
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{6000, 9000});
  CHECK(span_of(s, w, StreamId::kCompute, "g3") == Interval{9000, 10000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{10000, 15000});
  CHECK(span_of(s, w, StreamId::kCompute, "g2") == Interval{10000, 12000});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{15000, 16500});
  CHECK(s.timeline.iteration_ns == 16500);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapOut)] == 3000);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapIn)] == 3000);
  REQUIRE(s.timeline.stalls.size() == 2);
  CHECK(s.timeline.stalls[0].cause == StallCause::kSwapOut);
  CHECK(s.timeline.stalls[0].start_ns == 3000);
  CHECK(s.timeline.stalls[0].end_ns == 6000);
  CHECK(s.timeline.stalls[1].cause == StallCause::kSwapIn);
  CHECK(s.timeline.stalls[1].start_ns == 12000);
  CHECK(s.timeline.stalls[1].end_ns == 15000);
  CHECK(w.tensor(s.timeline.stalls[1].tensor).name == "f1_out");
  CHECK(w.op(s.timeline.stalls[1].op).name == "g1");
}

TEST_CASE("a release point after the copy-out's end lets compute run on while it copies",
          "[scenario]") {
  // The step of the test above, with f1_out's free moved from its last forward use (f2) to before
  // g3 (Note [Release point]). The copy-out [1000,6000] no longer holds compute at f2's end: f3
  // runs [3000,6000], and before g3, at 6000, the copy-out has just ended, so nothing waits; g3
  // [6000,7000]. The prefetch is issued before g2 at 7000 and lands at 12000; g2 [7000,9000],
  // g1 waits 3000 ns and runs [12000,13500]: 3000 ns less than freeing at the last forward use.
  const Workload w = chain3(5000);
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"f1_out", Action::kSwap, Encoding::kNone, "", "g3"}}),
      test_machine(kPlenty));
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 6000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 3000});
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{3000, 6000});
  CHECK(span_of(s, w, StreamId::kCompute, "g3") == Interval{6000, 7000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{7000, 12000});
  CHECK(span_of(s, w, StreamId::kCompute, "g2") == Interval{7000, 9000});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{12000, 13500});
  CHECK(s.timeline.iteration_ns == 13500);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapOut)] == 0);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapIn)] == 3000);
  // The map holds its memory until then: the compute stream frees it right after waiting for the
  // copy-out before g3's first instruction, not after f2.
  const auto& compute = s.program.stream(StreamId::kCompute);
  std::vector<std::string> around_g3;
  for (std::size_t i = 0; i < compute.size(); ++i) {
    if (compute[i].op != kNoOp && w.op(compute[i].op).name == "g3")
      around_g3.push_back(std::string(to_string(compute[i].kind)));
  }
  CHECK(around_g3 == std::vector<std::string>{"wait", "free", "alloc", "run", "free"});
}

TEST_CASE("a release point before the copy-out's end waits there, as freeing at the last use",
          "[scenario]") {
  // Moved only to f3, the free waits at f3's start (3000) for the copy-out until 6000: the same
  // 3000 ns stall, one op later, and f3 [6000,9000] as in "a swap that is not hidden".
  const Workload w = chain3(5000);
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"f1_out", Action::kSwap, Encoding::kNone, "", "f3"}}),
      test_machine(kPlenty));
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{6000, 9000});
  REQUIRE(s.timeline.stalls.size() == 2);
  CHECK(s.timeline.stalls[0].cause == StallCause::kSwapOut);
  CHECK(s.timeline.stalls[0].start_ns == 3000);
  CHECK(s.timeline.stalls[0].end_ns == 6000);
  CHECK(w.op(s.timeline.stalls[0].op).name == "f3");
  CHECK(s.timeline.iteration_ns == 16500);
}

TEST_CASE("a copy's cost is latency plus bytes over the bandwidth of its direction", "[scenario]") {
  const Workload w = chain3(1000);
  Machine m = test_machine(kPlenty, 1e9, 250);
  m.link.h2d_bytes_per_s = 0.5e9;  // 2 ns per byte
  const auto s = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 2250});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{7000, 9250});
  // g1 waits from 9000 (end of g2) to 9250.
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{9250, 10750});
}

TEST_CASE("two copies in the same direction run one after another", "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const OpId f1 = b.op("f1", "split", Phase::kForward, {x}, {{"a1", 2000}, {"a2", 1000}}, 1000);
  const auto a1 = b.workload().ops[static_cast<std::size_t>(f1)].outputs[0];
  const auto a2 = b.workload().ops[static_cast<std::size_t>(f1)].outputs[1];
  const auto y = b.forward("f2", {a1, a2}, 100, 5000);
  b.backward("g", {y, a1, a2}, 100, 1000);
  const Workload w = b.build();
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"a1", Action::kSwap}, {"a2", Action::kSwap}}), test_machine(kPlenty));
  // Both maps are written at 1000; a2's copy-out waits for a1's on the one d2h engine.
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out a1") == Interval{1000, 3000});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out a2") == Interval{3000, 4000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 6000});
  // Both prefetches are issued before g at 6000 and serialise on the h2d engine.
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in a1") == Interval{6000, 8000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in a2") == Interval{8000, 9000});
  CHECK(span_of(s, w, StreamId::kCompute, "g") == Interval{9000, 10000});
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapIn)] == 3000);
  CHECK(s.timeline.iteration_ns == 10000);
}

TEST_CASE("host-to-device and device-to-host copies overlap", "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, 1000, 1000);
  const auto c = b.forward("f2", {a}, 3000, 1500);
  b.forward("f3", {c}, 10, 4000);
  const auto gc = b.backward("g3", {c}, 10, 1000);
  b.backward("g1", {gc, a}, 10, 1000);
  const Workload w = b.build();
  const auto s = memplan::test::simulate(
      w,
      plan_with(w, {{"f1_out", Action::kSwap, Encoding::kNone, "f3"}, {"f2_out", Action::kSwap}}),
      test_machine(kPlenty));
  // f1_out is prefetched early (before f3, at 2500) while f2_out is being copied out: the two
  // directions run at the same time.
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 2500});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out f2_out") == Interval{2500, 5500});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f1_out") == Interval{2500, 3500});
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{2500, 6500});
  // f2_out comes back before its first backward use g3 (the op before it is its drop point).
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in f2_out") == Interval{6500, 9500});
  CHECK(span_of(s, w, StreamId::kCompute, "g3") == Interval{9500, 10500});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{10500, 11500});
  CHECK(s.timeline.iteration_ns == 11500);
  CHECK(s.timeline.op_compute_ns == 8500);
  CHECK(s.timeline.peak_host_bytes == 4000);  // both maps on the host during [2500, 3500]
}

TEST_CASE("a recompute chain of three ops", "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, 100, 1000);
  const auto bb = b.forward("f2", {a}, 100, 2000);
  const auto c = b.forward("f3", {bb}, 100, 3000);
  b.forward("f4", {c}, 10, 500);
  const auto gc = b.backward("g4", {c}, 100, 1000);
  const auto gb = b.backward("g3", {gc, bb}, 100, 1000);
  const auto ga = b.backward("g2", {gb, a}, 100, 1000);
  b.backward("g1", {ga, x}, 100, 1000);
  const Workload w = b.build();
  const auto s = memplan::test::simulate(w,
                                         plan_with(w, {{"f1_out", Action::kRecompute},
                                                       {"f2_out", Action::kRecompute},
                                                       {"f3_out", Action::kRecompute}}),
                                         test_machine(kPlenty));
  // g4 needs f3_out, whose producer needs f2_out, whose producer needs f1_out, whose producer needs
  // x (resident): f1, f2, f3 run again in that order; f1_out and f2_out then stay for g3 and g2.
  CHECK(span_labels(s, w, StreamId::kCompute) ==
        std::vector<std::string>{"f1", "f2", "f3", "f4", "f1 (recompute)", "f2 (recompute)",
                                 "f3 (recompute)", "g4", "g3", "g2", "g1"});
  CHECK(span_of(s, w, StreamId::kCompute, "f1 (recompute)") == Interval{6500, 7500});
  CHECK(span_of(s, w, StreamId::kCompute, "f2 (recompute)") == Interval{7500, 9500});
  CHECK(span_of(s, w, StreamId::kCompute, "f3 (recompute)") == Interval{9500, 12500});
  CHECK(span_of(s, w, StreamId::kCompute, "g4") == Interval{12500, 13500});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{15500, 16500});
  CHECK(s.timeline.iteration_ns == 16500);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kRecompute)] == 6000);
  CHECK(s.program.stream(StreamId::kD2H).empty());
}

TEST_CASE("out of memory at a named op", "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 512);
  const auto a = b.forward("f1", {x}, 1024, 1000);
  const auto bb = b.forward("f2", {a}, 1024, 2000);
  const auto c = b.forward("f3", {bb}, 2048, 3000);
  const auto gc = b.backward("g3", {c}, 512, 1000);
  const auto gb = b.backward("g2", {gc, bb}, 512, 1000);
  b.backward("g1", {gb, a, x}, 512, 1000);
  const Workload w = b.build();
  const auto s = memplan::test::simulate(w, plan_with(w, {}), test_machine(4096));
  // Live before f3: x 512 + f1_out 1024 + f2_out 1024 = 2560 at [0, 2560); f3_out needs 2048 but
  // only [2560, 4096) is free.
  REQUIRE_FALSE(s.timeline.feasible);
  REQUIRE(s.timeline.oom);
  const OomReport& oom = *s.timeline.oom;
  CHECK(w.op(oom.op).name == "f3");
  CHECK(oom.time_ns == 3000);
  CHECK(oom.requested_bytes == 2048);
  CHECK(oom.live_bytes == 2560);
  CHECK(oom.live_by_kind[static_cast<int>(TensorKind::kInput)] == 512);
  CHECK(oom.live_by_kind[static_cast<int>(TensorKind::kActivation)] == 2048);
  CHECK(oom.largest_free_block == 1536);
  CHECK(oom.bytes_missing == 512);
  CHECK_FALSE(oom.host);
  // At the in-core peak (5120 bytes, at g3) the same plan fits exactly.
  const auto fits = memplan::test::simulate(w, plan_with(w, {}), test_machine(5120));
  CHECK(fits.timeline.feasible);
  CHECK(fits.timeline.peak_bytes == 5120);
  CHECK(fits.timeline.peak_bytes == incore_peak(w).bytes);
}

TEST_CASE("fragmentation makes infeasible a plan that live bytes alone would allow", "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 512);
  const auto a = b.forward("f1", {x}, 512, 1000);
  const auto bb = b.forward("f2", {a}, 512, 1000);
  b.forward("f3", {bb, x}, 1024, 1000);
  const Workload w = b.build();
  // x [0,512), f1_out [512,1024), f2_out [1024,1536); f1_out dies after f2, leaving two 512-byte
  // holes around f2_out. f3_out needs 1024: live 1024 + 1024 = 2048 fits the capacity, no block
  // does.
  const auto s = memplan::test::simulate(w, plan_with(w, {}), test_machine(2048));
  REQUIRE_FALSE(s.timeline.feasible);
  CHECK(w.op(s.timeline.oom->op).name == "f3");
  CHECK(s.timeline.oom->live_bytes == 1024);
  CHECK(s.timeline.oom->largest_free_block == 512);
  CHECK(s.timeline.oom->bytes_missing == 512);
  const auto roomy = memplan::test::simulate(w, plan_with(w, {}), test_machine(2560));
  REQUIRE(roomy.timeline.feasible);
  CHECK(roomy.timeline.peak_bytes == 2048);
  CHECK(roomy.timeline.peak_reserved_bytes == 2560);
}

TEST_CASE("an encoded map is encoded after its last forward use and decoded before backward",
          "[scenario]") {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto conv = b.forward("conv", {x}, 64000, 1000, "conv2d");
  const auto relu = b.forward_in_place("relu", conv, 100);
  const auto pool = b.forward("pool", {relu}, 16000, 1000, "max_pool2d");
  const auto gp = b.backward("pool_bwd", {pool, relu}, 64000, 1000, "max_pool2d");
  b.backward("conv_bwd", {gp, x}, 100, 1000, "conv2d");
  const Workload w = b.build();
  Machine m = test_machine(kPlenty);
  m.memory_bandwidth_bytes_per_s = 64e9;  // 64000 bytes take 1000 ns
  const auto s = memplan::test::simulate(
      w, plan_with(w, {{"relu_out", Action::kEncode, Encoding::kBinarize}}), m);
  CHECK(span_labels(s, w, StreamId::kCompute) ==
        std::vector<std::string>{"conv", "relu", "pool", "encode relu_out", "decode relu_out",
                                 "pool_bwd", "conv_bwd"});
  CHECK(span_of(s, w, StreamId::kCompute, "encode relu_out") == Interval{2100, 3100});
  CHECK(span_of(s, w, StreamId::kCompute, "decode relu_out") == Interval{3100, 4100});
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kCodec)] == 2000);
  Bytes encoded = 0;
  for (const Buffer& buf : s.program.buffers) {
    if (buf.role == BufferRole::kEncoded) encoded = buf.bytes;
  }
  CHECK(encoded == 2000);  // 1/32
}

TEST_CASE("swapped maps beyond the pinned host memory are infeasible", "[scenario]") {
  const Workload w = chain3(1000);
  Machine m = test_machine(kPlenty);
  m.host_memory_bytes = 999;
  const auto s = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  REQUIRE_FALSE(s.timeline.feasible);
  REQUIRE(s.timeline.oom);
  CHECK(s.timeline.oom->host);
  CHECK(s.timeline.oom->time_ns == 1000);  // the copy-out starts
  CHECK(s.timeline.oom->bytes_missing == 1);
  m.host_memory_bytes = 1000;
  CHECK(memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m).timeline.feasible);
}
