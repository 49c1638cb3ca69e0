// Golden timelines of steps on several device streams and several ranks (Note [Device streams] in
// core/workload.hpp, Note [Collective start] in sim/engine.hpp, sim/job_simulation.hpp). Every
// number is worked out by hand in the comments first: 1 GB/s copy links (1 byte per ns), no copy
// latency, collectives at their recorded time unless a test gives the machine an interconnect.
#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "sim/job_simulation.hpp"
#include "sim/lowering.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::kPlenty;
using memplan::test::plan_with;
using memplan::test::span_of;
using memplan::test::test_machine;
using memplan::test::WorkloadBuilder;
using Interval = std::pair<Nanoseconds, Nanoseconds>;

namespace {

constexpr StreamId kSide = program_stream(1);

/// Moves op `op` to device stream 1 of `w` (labelled "nccl") and, with `collective`, makes it one.
void to_side_stream(Workload& w, OpId op, std::optional<Collective> collective = std::nullopt) {
  w.streams = {"compute", "nccl"};
  w.ops[index(op)].stream = 1;
  w.ops[index(op)].collective = std::move(collective);
}

Collective all_gather(Bytes in, Bytes out) {
  Collective c;
  c.kind = CollectiveKind::kAllGather;
  c.in_bytes = in;
  c.out_bytes = out;
  c.group = "0";
  return c;
}

/// The ranks' plans simulated together, each rank on `machine`.
JobRun run_job(const std::vector<Workload>& ranks, const std::vector<Plan>& plans,
               const Machine& machine) {
  return simulate_job(Job{ranks}, plans, std::vector<Machine>(ranks.size(), machine));
}

/// [start, end] of the span labelled `label` on `stream` of rank `r`.
Interval rank_span(const JobRun& job, const std::vector<Workload>& ranks, std::size_t r,
                   StreamId stream, const std::string& label) {
  const memplan::test::Simulation s{job.programs[r], job.timeline.ranks[r]};
  return span_of(s, ranks[r], stream, label);
}

}  // namespace

TEST_CASE("two device streams joined by an event", "[scenario][streams]") {
  // f1 (1000) on compute; s1 (3000) on a side stream, issued after f1; f2 (2000) on compute; f3
  // (500) on compute waits for s1 (`after`, a recorded cudaStreamWaitEvent).
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, 100, 1000);
  b.forward("s1", {x}, 100, 3000);
  const OpId s1 = b.last_op();
  const auto c = b.forward("f2", {a}, 100, 2000);
  b.forward("f3", {c}, 100, 500);
  to_side_stream(b.workload(), s1);
  b.workload().ops.back().after = {s1};
  const Workload w = b.build();
  const auto s = memplan::test::simulate(w, plan_with(w, {}), test_machine(kPlenty));
  // s1 waits for what compute issued before it (f1, ends at 1000): [1000, 4000], beside f2
  // [1000, 3000]. f3 waits for s1's end: [4000, 4500]. Waiting for another stream is the step's
  // own structure, not a stall a plan caused.
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kCompute, "f1") == Interval{0, 1000});
  CHECK(span_of(s, w, kSide, "s1") == Interval{1000, 4000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{1000, 3000});
  CHECK(span_of(s, w, StreamId::kCompute, "f3") == Interval{4000, 4500});
  CHECK(s.timeline.iteration_ns == 4500);
  CHECK(s.timeline.stall_ns() == 0);
  // The compute stream's own work: f1 + f2 + f3 (s1 ran on the other stream).
  CHECK(s.timeline.op_compute_ns == 3500);
}

TEST_CASE("a collective on its own stream overlaps compute", "[scenario][streams]") {
  // b1 (1000) writes gradient g1; ar all-reduces g1 on the nccl stream (recorded transfer 2500);
  // b2 (2000) runs meanwhile; the update (500) waits for ar (DDP's work.wait()).
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto y = b.forward("f", {x}, 100, 1000);
  const auto g1 = b.backward("b1", {y}, 100, 1000);
  const OpId b1 = b.last_op();
  const OpId ar = b.op("ar", "all_reduce", Phase::kBackward, {g1}, {}, 2500);
  const auto g2 = b.backward("b2", {y}, 100, 2000);
  b.op("upd", "sgd", Phase::kUpdate, {g1, g2}, {}, 500);
  Collective c;
  c.kind = CollectiveKind::kAllReduce;
  c.in_bytes = c.out_bytes = 100;
  to_side_stream(b.workload(), ar, c);
  b.workload().ops.back().after = {ar};
  const Workload w = b.build();
  const auto s = memplan::test::simulate(w, plan_with(w, {}), test_machine(kPlenty));
  // f [0,1000], b1 [1000,2000]; ar issued after b1: [2000, 4500] beside b2 [2000, 4000]; upd
  // waits for ar: [4500, 5000]. One rank alone: its collective starts on arrival.
  REQUIRE(b1 == op_id(1));
  CHECK(span_of(s, w, kSide, "ar") == Interval{2000, 4500});
  CHECK(span_of(s, w, StreamId::kCompute, "b2") == Interval{2000, 4000});
  CHECK(span_of(s, w, StreamId::kCompute, "upd") == Interval{4500, 5000});
  CHECK(s.timeline.iteration_ns == 5000);
  REQUIRE(s.timeline.collectives.size() == 1);
  CHECK(s.timeline.collectives[0].arrival_ns == 2000);
  CHECK(s.timeline.collectives[0].wait_ns() == 0);
  CHECK(s.timeline.collectives[0].transfer_ns() == 2500);
}

namespace {

// One rank of a 2-rank job: f1 (`f1_ns`) writes a (1000 bytes), f2 (100) reads a and writes b, ag
// all-gathers b on the nccl stream (recorded transfer 500) into c, f3 (1000) reads c, g3 (1000)
// and g1 (1000) are the backward pass, g1 reading a again (a is a feature map).
Workload gather_rank(std::int32_t rank, Nanoseconds f1_ns) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, 1000, f1_ns);
  const auto bb = b.forward("f2", {a}, 100, 100);
  const OpId ag = b.op("ag", "all_gather", Phase::kForward, {bb}, {{"c", 200}}, 500);
  const auto c = b.workload().ops.back().outputs.front();
  const auto d = b.forward("f3", {c}, 100, 1000);
  const auto gd = b.backward("g3", {d}, 100, 1000);
  b.backward("g1", {gd, a}, 100, 1000);
  to_side_stream(b.workload(), ag, all_gather(100, 200));
  b.workload().distributed = Distributed{"nccl", rank, 2, std::nullopt, std::nullopt};
  return b.build();
}

}  // namespace

TEST_CASE("a late rank makes the other wait, and a swap that fits the wait costs nothing",
          "[scenario][job]") {
  // Rank 1's f1 takes 3000 where rank 0's takes 1000.
  const std::vector<Workload> ranks{gather_rank(0, 1000), gather_rank(1, 3000)};
  const Machine m = test_machine(kPlenty);
  const std::vector<Plan> in_core{plan_with(ranks[0], {}), plan_with(ranks[1], {})};
  const JobRun job = run_job(ranks, in_core, m);
  // Rank 0 reaches ag after f2 at 1100, rank 1 at 3100: ag runs [3100, 3600] on both. f3 waits
  // for it, [3600, 4600]; g3 [4600, 5600]; g1 [5600, 6600] on both ranks.
  REQUIRE(job.timeline.feasible);
  CHECK(job.timeline.rounds == 2);  // the ready time moves once, then settles
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(rank_span(job, ranks, r, kSide, "ag") == Interval{3100, 3600});
    CHECK(rank_span(job, ranks, r, StreamId::kCompute, "f3") == Interval{3600, 4600});
    CHECK(job.timeline.ranks[r].iteration_ns == 6600);
  }
  // The report: rank 0 waited 2000 for its late peer, rank 1 not at all; both transfers 500.
  CHECK(job.timeline.ranks[0].collectives[0].wait_ns() == 2000);
  CHECK(job.timeline.ranks[1].collectives[0].wait_ns() == 0);
  CHECK(job.timeline.ranks[0].collectives[0].transfer_ns() == 500);
  CHECK(job.timeline.step_ns == 6600);

  // Rank 0 swaps a: its copy-out [1000, 2000] holds the compute stream after f2 (a goes once the
  // copy has read it) until 2000, and rank 0 reaches ag at 2000 — still before rank 1 at 3100.
  // The prefetch, issued before g3 at 4600, lands at 5600 when g1 starts. Nothing moves: the swap
  // costs nothing, and rank 0 now waits 1100.
  const std::vector<Plan> rank0_swaps{plan_with(ranks[0], {{"f1_out", Action::kSwap}}), in_core[1]};
  const JobRun hidden = run_job(ranks, rank0_swaps, m);
  REQUIRE(hidden.timeline.feasible);
  CHECK(rank_span(hidden, ranks, 0, StreamId::kD2H, "copy-out f1_out") == Interval{1000, 2000});
  CHECK(rank_span(hidden, ranks, 0, StreamId::kH2D, "copy-in f1_out") == Interval{4600, 5600});
  CHECK(hidden.timeline.ranks[0].collectives[0].arrival_ns == 2000);
  CHECK(hidden.timeline.ranks[0].collectives[0].wait_ns() == 1100);
  CHECK(hidden.timeline.step_ns == 6600);
  CHECK(hidden.timeline.ranks[0].iteration_ns == 6600);
}

TEST_CASE("a swap that delays its rank's arrival delays the other rank too", "[scenario][job]") {
  const std::vector<Workload> ranks{gather_rank(0, 1000), gather_rank(1, 3000)};
  const Machine m = test_machine(kPlenty);
  // Rank 1 (the late one) swaps a: copy-out [3000, 4000]; f2 [3000, 3100], then compute waits for
  // the copy-out until 4000 (a 900 ns swap-out stall), so rank 1 reaches ag at 4000, not 3100. ag
  // runs [4000, 4500] on both ranks; f3 [4500, 5500], g3 [5500, 6500]; rank 1's prefetch before
  // g3, [5500, 6500], lands as g1 starts: g1 [6500, 7500] on both. Both ranks lose 900 ns.
  const std::vector<Plan> plans{plan_with(ranks[0], {}),
                                plan_with(ranks[1], {{"f1_out", Action::kSwap}})};
  const JobRun job = run_job(ranks, plans, m);
  REQUIRE(job.timeline.feasible);
  CHECK(job.timeline.ranks[1].stall_ns_by_cause[static_cast<std::size_t>(StallCause::kSwapOut)] ==
        900);
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(rank_span(job, ranks, r, kSide, "ag") == Interval{4000, 4500});
    CHECK(rank_span(job, ranks, r, StreamId::kCompute, "g1") == Interval{6500, 7500});
    CHECK(job.timeline.ranks[r].iteration_ns == 7500);
  }
  CHECK(job.timeline.ranks[0].collectives[0].wait_ns() == 2900);
  CHECK(job.timeline.step_ns == 7500);
}

namespace {

// One rank of a 2-rank DDP step: b1 (1000) writes g1 (1000 bytes), ar all-reduces it on the nccl
// stream (recorded 9999 ns: what the interconnect replaces), the update (500) waits for it.
Workload all_reduce_rank(std::int32_t rank, Nanoseconds b1_ns) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto y = b.forward("f", {x}, 100, 1000);
  const auto g1 = b.backward("b1", {y}, 1000, b1_ns);
  const OpId ar = b.op("ar", "all_reduce", Phase::kBackward, {g1}, {}, 9999);
  b.op("upd", "sgd", Phase::kUpdate, {g1}, {}, 500);
  Collective c;
  c.kind = CollectiveKind::kAllReduce;
  c.in_bytes = c.out_bytes = 1000;
  c.group = "0";
  to_side_stream(b.workload(), ar, c);
  b.workload().ops.back().after = {ar};
  b.workload().distributed = Distributed{"nccl", rank, 2, std::nullopt, std::nullopt};
  return b.build();
}

Machine with_fabric(BytesPerSecond bytes_per_s, Nanoseconds latency_ns) {
  Machine m = test_machine(kPlenty);
  m.interconnect = Interconnect{"test", {bytes_per_s, latency_ns}, {bytes_per_s, latency_ns}, 8};
  return m;
}

}  // namespace

TEST_CASE("a 2-rank ring all-reduce under two bandwidths", "[scenario][job]") {
  const std::vector<Workload> ranks{all_reduce_rank(0, 1000), all_reduce_rank(1, 1000)};
  const std::vector<Plan> plans{plan_with(ranks[0], {}), plan_with(ranks[1], {})};
  // n = 2 on one node, S = 1000 bytes, a = 100 ns. At 1 GB/s (1 byte/ns): ring 2(n-1)a +
  // 2(n-1)/n S/B = 200 + 1000 = 1200 ns; tree 2 ceil(log2 2) a + 2 S/B = 200 + 2000 = 2200: the
  // ring. Both ranks reach ar after b1 at 2000: ar [2000, 3200], upd [3200, 3700].
  const JobRun fast = run_job(ranks, plans, with_fabric(1e9, 100));
  // At 0.5 GB/s: ring 200 + 2000 = 2200 (tree 200 + 4000): ar [2000, 4200], upd [4200, 4700].
  const JobRun slow = run_job(ranks, plans, with_fabric(0.5e9, 100));
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(rank_span(fast, ranks, r, kSide, "ar") == Interval{2000, 3200});
    CHECK(rank_span(fast, ranks, r, StreamId::kCompute, "upd") == Interval{3200, 3700});
    CHECK(rank_span(slow, ranks, r, kSide, "ar") == Interval{2000, 4200});
    CHECK(rank_span(slow, ranks, r, StreamId::kCompute, "upd") == Interval{4200, 4700});
    CHECK(fast.timeline.ranks[r].collectives[0].wait_ns() == 0);
  }
  CHECK(fast.timeline.step_ns == 3700);
  CHECK(slow.timeline.step_ns == 4700);
  // Without an interconnect the recorded transfer stands: ar [2000, 11999].
  const JobRun recorded = run_job(ranks, plans, test_machine(kPlenty));
  CHECK(rank_span(recorded, ranks, 0, kSide, "ar") == Interval{2000, 11999});
}

namespace {

// FSDP's gathered parameters, in small: p (100 B, a parameter shard) is all-gathered by ag on the
// nccl stream (recorded transfer 500) into w (400 B), which f2 reads in forward and g2 in
// backward: a feature map an op of another stream writes. f1 writes a (100), f2 y, f3 z (100
// each); g3 reads z, g2 reads y and w, g1 reads a; each op takes 1000 ns (`g3_ns` for g3) and the
// backward ops' outputs (100 each) are read by nothing, so each goes right after its op.
Workload gathered_rank(std::int32_t rank, Nanoseconds g3_ns) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto p = b.parameter("p", 100);
  const auto a = b.forward("f1", {x}, 100, 1000);
  const OpId ag = b.op("ag", "all_gather", Phase::kForward, {p}, {{"w", 400}}, 500);
  const auto w = b.workload().ops.back().outputs.front();
  const auto y = b.forward("f2", {a, w}, 100, 1000);
  const auto z = b.forward("f3", {y}, 100, 1000);
  b.backward("g3", {z}, 100, g3_ns);
  b.backward("g2", {y, w}, 100, 1000);
  b.backward("g1", {a}, 100, 1000);
  to_side_stream(b.workload(), ag, all_gather(100, 400));
  b.workload().distributed = Distributed{"nccl", rank, 2, std::nullopt, std::nullopt};
  return b.build();
}

}  // namespace

TEST_CASE("a map written by a collective is recomputed by re-running it on its stream",
          "[scenario][streams]") {
  const Workload w = gathered_rank(0, 1000);
  const Machine m = test_machine(kPlenty);
  // Kept (FSDP's SHARD_GRAD_OP): f1 [0, 1000]; ag, issued after f1, [1000, 1500]; f2 waits for it,
  // [1500, 2500]; f3 [2500, 3500], g3 [3500, 4500], g2 [4500, 5500], g1 [5500, 6500]. Memory: x and
  // p (200) at the start, a (300), x goes after f1 (200), w at ag's issue (600), y (700), z (800),
  // g3's output (900, the peak), then down.
  const auto kept = memplan::test::simulate(w, plan_with(w, {}), test_machine(kPlenty));
  REQUIRE(kept.timeline.feasible);
  CHECK(span_of(kept, w, kSide, "ag") == Interval{1000, 1500});
  CHECK(kept.timeline.iteration_ns == 6500);
  CHECK(kept.timeline.peak_bytes == 900);
  CHECK(kept.timeline.collectives.size() == 1);

  // Recomputed where g2 needs it (FULL_SHARD without backward prefetch): w goes after f2, its last
  // forward use (f2 waited for ag, so the compute stream has joined it): 300 after f2, z 400, g3's
  // output 500. Before g2, ag runs again on the nccl stream: issued after g3 [4500, 5000], a call
  // of its own numbered after the workload's (sequence 1); g2 waits for it [5000, 6000], g1 [6000,
  // 7000]. Memory at g2: a, p, y, w again, g2's output: 800, the peak.
  const auto regathered = memplan::test::simulate(w, plan_with(w, {{"w", Action::kRecompute}}), m);
  REQUIRE(regathered.timeline.feasible);
  CHECK(span_of(regathered, w, kSide, "ag", 0) == Interval{1000, 1500});
  CHECK(span_of(regathered, w, kSide, "ag", 1) == Interval{4500, 5000});
  CHECK(span_of(regathered, w, StreamId::kCompute, "g2") == Interval{5000, 6000});
  CHECK(regathered.timeline.iteration_ns == 7000);
  CHECK(regathered.timeline.peak_bytes == 800);
  REQUIRE(regathered.program.collectives.size() == 2);
  CHECK(regathered.program.workload_collectives == 1);
  CHECK(regathered.program.collectives[1].sequence == 1);
  CHECK(regathered.program.collectives[1].kind == CollectiveKind::kAllGather);
  CHECK(regathered.timeline.collectives[1].arrival_ns == 4500);

  // Issued before g3 (FSDP's backward prefetch): ag runs [3500, 4000] beside g3 [3500, 4500], and
  // g2 runs at once [4500, 5500]: the step of the kept plan, 6500. w is held from g3 on: a, p, y,
  // z, w (800) and g3's output, 900 — what the overlap costs.
  const auto prefetched = memplan::test::simulate(
      w, plan_with(w, {{"w", Action::kRecompute, Encoding::kNone, "g3"}}), m);
  REQUIRE(prefetched.timeline.feasible);
  CHECK(span_of(prefetched, w, kSide, "ag", 1) == Interval{3500, 4000});
  CHECK(span_of(prefetched, w, StreamId::kCompute, "g3") == Interval{3500, 4500});
  CHECK(span_of(prefetched, w, StreamId::kCompute, "g2") == Interval{4500, 5500});
  CHECK(prefetched.timeline.iteration_ns == 6500);
  CHECK(prefetched.timeline.peak_bytes == 900);
}

TEST_CASE("the ranks' re-run collectives are matched as one call", "[scenario][job]") {
  // Both ranks recompute w where g2 needs it; rank 1's g3 takes 2000. The first ag: both arrive
  // at 1000, [1000, 1500]. The re-run: rank 0 arrives after its g3 at 4500, rank 1 at 5500, so it
  // runs [5500, 6000] on both (sequence 1 on each); g2 [6000, 7000], g1 [7000, 8000] on both.
  const std::vector<Workload> ranks{gathered_rank(0, 1000), gathered_rank(1, 2000)};
  const std::vector<Plan> plans{plan_with(ranks[0], {{"w", Action::kRecompute}}),
                                plan_with(ranks[1], {{"w", Action::kRecompute}})};
  const JobRun job = run_job(ranks, plans, test_machine(kPlenty));
  REQUIRE(job.timeline.feasible);
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(rank_span(job, ranks, r, kSide, "ag") == Interval{1000, 1500});
    CHECK(job.timeline.ranks[r].iteration_ns == 8000);
  }
  CHECK(job.timeline.ranks[0].collectives[1].wait_ns() == 1000);
  CHECK(job.timeline.ranks[1].collectives[1].wait_ns() == 0);
  CHECK(job.timeline.ranks[0].collectives[1].start_ns == 5500);
  CHECK(job.timeline.step_ns == 8000);
  // Rank 0 searched among its peers held fixed: its re-run has no ready time of its own (another
  // plan re-runs others), so it starts on arrival, its peers alike.
  const std::vector<const Program*> programs{&job.programs[0], &job.programs[1]};
  CHECK(peer_ready_ns(programs, job.timeline, 0) == std::vector<Nanoseconds>{1000});
}

TEST_CASE("ranks start their step where the job recorded it", "[scenario][job]") {
  // Both ranks' f1 takes 1000, but rank 1 started its step 2000 ns after rank 0 (step_start_ns).
  // Each reaches ag at 1100 of its own step: rank 0 at 1100 of the job's time, rank 1 at 3100. ag
  // starts at 3100: [3100, 3600] in rank 0's frame, [1100, 1600] in rank 1's. Rank 0 then runs
  // f3 [3600, 4600], g3 [4600, 5600], g1 [5600, 6600]; rank 1 ends at 4600 of its own frame
  // (6600 of the job's): the step ends together, rank 0's 2000 ns longer, as it recorded.
  std::vector<Workload> ranks{gather_rank(0, 1000), gather_rank(1, 1000)};
  ranks[0].distributed->step_start_ns = 50'000;
  ranks[1].distributed->step_start_ns = 52'000;
  const std::vector<Plan> plans{plan_with(ranks[0], {}), plan_with(ranks[1], {})};
  const JobRun job = run_job(ranks, plans, test_machine(kPlenty));
  REQUIRE(job.timeline.feasible);
  CHECK(rank_span(job, ranks, 0, kSide, "ag") == Interval{3100, 3600});
  CHECK(rank_span(job, ranks, 1, kSide, "ag") == Interval{1100, 1600});
  CHECK(job.timeline.ranks[0].iteration_ns == 6600);
  CHECK(job.timeline.ranks[1].iteration_ns == 4600);
  CHECK(job.timeline.ranks[0].collectives[0].wait_ns() == 2000);
  CHECK(job.timeline.step_ns == 6600);
  CHECK(job.timeline.slowest == 0);
  // Back to back, each rank's next step starts when it ends: rank 0 at 6600, rank 1 at 2000 +
  // 4600 = 6600 — together, so from then on neither waits and the period is the step alone,
  // 4600 (no host side: each rank leaves its step when its device is done).
  CHECK(job.period_ns == 4600);
}

TEST_CASE("back to back, a host that runs ahead does not set the job's period", "[scenario][job]") {
  // Rank 0 has a host side that launches each op 100 ns after the one before and never waits:
  // f1 at 100 [100, 1100], f2 [1100, 1200], ag launched at 300 arrives at 1200; its host is done
  // at 600 (the sixth launch). Rank 1 (f1 3000, no host side) arrives at 3100: ag [3100, 3600] on
  // both, then f3, g3, g1: both ranks end at 6600, the step alone.
  std::vector<Workload> ranks{gather_rank(0, 1000), gather_rank(1, 3000)};
  for (Op& op : ranks[0].ops) op.host = HostSide{100, false, 0};
  const std::vector<Plan> plans{plan_with(ranks[0], {}), plan_with(ranks[1], {})};
  const JobRun job = run_job(ranks, plans, test_machine(kPlenty));
  REQUIRE(job.timeline.feasible);
  CHECK(job.timeline.ranks[0].host_end_ns == 600);
  CHECK(job.timeline.step_ns == 6600);
  CHECK(job.timeline.ranks[0].iteration_ns == 6600);
  // Back to back rank 0's host starts a step every 600 ns, but its device meets rank 1 at the
  // gather each step: rank 1 starts its next step at 6600 and arrives at 9700, and rank 0's g1
  // ends 3500 later, at 13200, 6600 after the first step's end; and so every step. Rank 0's
  // backlog grows by 6000 a step: the job's period is the growth of its end, 6600, not that of
  // its earliest start (600, the host running ahead).
  CHECK(job.period_ns == 6600);
}

TEST_CASE("a buffer a side stream wrote goes after its last use once the stream was joined",
          "[scenario][streams]") {
  // ag (nccl stream) writes c; f3 waits for ag (it reads c) and is c's last use: the compute stream
  // has joined ag by then, so c is freed right after f3, not held to a later join or the end.
  const Workload w = gather_rank(0, 1000);
  const Program p = lower(w, plan_with(w, {}));
  const auto& compute = p.stream(StreamId::kCompute);
  std::size_t f3 = compute.size();
  for (std::size_t i = 0; i < compute.size(); ++i) {
    if (compute[i].kind == InstrKind::kRun && w.op(compute[i].op).name == "f3") f3 = i;
  }
  REQUIRE(f3 + 1 < compute.size());
  const Instruction& next = compute[f3 + 1];
  CHECK(next.kind == InstrKind::kFree);
  CHECK(w.tensor(p.buffers[index(next.buffer)].tensor).name == "c");
}
