// Golden timelines of the host stream (Note [Host stream] in sim/engine.hpp): a step whose ops
// carry the dispatching thread's side, worked out by hand. 1 GB/s links (1 byte per nanosecond), no
// copy latency.
//
// The step: f1 -> f2 -> f3, then g3, g2, g1, every op 1000 ns on the GPU. f1_out is read by f2 and
// g1; swapping it lowers to (compute stream, op by op; allocs and frees take no time):
//   f1: alloc f1_out, run f1, record(producer)      d2h: wait(producer), copy-out, record(out)
//   f2: alloc f2_out, run f2, wait(out), free f1_out
//   f3, g3: alloc, run
//   g2: alloc f1_out, record(alloc), alloc, run g2  h2d: wait(alloc), copy-in, record(in)
//   g1: wait(in), alloc, run g1
// The prefetch is issued before g2 (the op before g1, the first backward use). The host
// dispatches each op at its first instruction: it spends the op's dispatch_ns, and nothing of the
// op starts on the device before that. A record that a copy waits for launches the copy.
#include <algorithm>
#include <optional>

#include <catch2/catch.hpp>

#include "io/timeline_export.hpp"
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

Workload step(Bytes map_bytes, Nanoseconds dispatch_ns, std::optional<Nanoseconds> launch_ns,
              const std::string& synchronizing_op = {}) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, map_bytes, 1000);
  const auto bb = b.forward("f2", {a}, 100, 1000);
  const auto c = b.forward("f3", {bb}, 100, 1000);
  const auto gc = b.backward("g3", {c}, 100, 1000);
  const auto gb = b.backward("g2", {gc, bb}, 100, 1000);
  b.backward("g1", {gb, a}, 100, 1000);
  for (Op& op : b.workload().ops) {
    op.host = HostSide{dispatch_ns, op.name == synchronizing_op};
  }
  b.workload().launch_ns = launch_ns;
  return b.build();
}

Nanoseconds stall(const Timeline& tl, StallCause cause) {
  return tl.stall_ns_by_cause[static_cast<std::size_t>(cause)];
}
}  // namespace

TEST_CASE("on a CPU-bound step a swap in the GPU's idle gaps costs nothing", "[scenario]") {
  // Every op takes 4000 ns of host time before its launch and 1000 ns on the GPU.
  const Workload w = step(3000, 4000, std::nullopt);
  const Machine m = test_machine(kPlenty);

  // In core: op k (0-based) is dispatched during [4000k, 4000(k+1)] and runs right after its
  // launch: f1 [4000,5000], f2 [8000,9000], ..., g1 [24000,25000]. The host ends at 24000, the
  // GPU at 25000; the GPU runs 6000 of 25000 ns: idle 19000 / 25000 = 0.76.
  const auto incore = memplan::test::simulate(w, in_core_plan(w), m);
  REQUIRE(incore.timeline.feasible);
  CHECK(span_of(incore, w, StreamId::kCompute, "f1") == Interval{4000, 5000});
  CHECK(span_of(incore, w, StreamId::kCompute, "g1") == Interval{24000, 25000});
  CHECK(incore.timeline.iteration_ns == 25000);
  CHECK(incore.timeline.host_busy_ns == 24000);
  CHECK(incore.timeline.compute_busy_ns == 6000);
  CHECK(incore.timeline.gpu_idle_share() == Approx(0.76));

  // Swapping f1_out: the copy-out (3000 bytes) is launched at f1's record (launches are free here)
  // and runs [5000,8000], before f2 [8000,9000] ends, so the wait(out) after f2 does not stall.
  // The prefetch is issued with g2's dispatch, which ends at 20000: the copy-in runs
  // [20000,23000] while g2 runs [20000,21000]; g1 is launched at 24000, after the map landed.
  // Same wall time as in core: the copies hide in the GPU's idle gaps.
  const auto swap = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  REQUIRE(swap.timeline.feasible);
  CHECK(span_of(swap, w, StreamId::kD2H, "copy-out f1_out") == Interval{5000, 8000});
  CHECK(span_of(swap, w, StreamId::kCompute, "f2") == Interval{8000, 9000});
  CHECK(span_of(swap, w, StreamId::kH2D, "copy-in f1_out") == Interval{20000, 23000});
  CHECK(span_of(swap, w, StreamId::kCompute, "g2") == Interval{20000, 21000});
  CHECK(span_of(swap, w, StreamId::kCompute, "g1") == Interval{24000, 25000});
  CHECK(swap.timeline.iteration_ns == 25000);
  CHECK(swap.timeline.stall_ns() == 0);

  // With a recorded tail of 3000 ns after the last launch, the step ends at max(25000, 24000 +
  // 3000) = 27000.
  Workload tailed = w;
  tailed.host_tail_ns = 3000;
  CHECK(memplan::test::simulate(tailed, in_core_plan(tailed), m).timeline.iteration_ns == 27000);
}

TEST_CASE("on a CPU-bound step a swap costs its launches on the host", "[scenario]") {
  // As above, but each instruction the plan adds costs 500 ns of host time to launch.
  const Workload w = step(3000, 4000, 500);
  const Machine m = test_machine(kPlenty);
  // In core the plan adds nothing: 25000 ns as before.
  CHECK(memplan::test::simulate(w, in_core_plan(w), m).timeline.iteration_ns == 25000);

  // f1 [4000,5000]; its record launches the copy-out: host [4000,4500], copy [5000,8000]. f2 is
  // dispatched [4500,8500] and runs [8500,9500]; f3 [12500,13500]; g3 [16500,17500]. g2's
  // dispatch ends at 20500, the prefetch's launch at 21000: copy-in [21000,24000], g2 [21000,
  // 22000]. g1 is dispatched [21000,25000]; its map landed at 24000: g1 [25000,26000]. The swap
  // costs its two launches (2 x 500 ns) and none of its 2 x 3000 ns of copies.
  const auto swap = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  REQUIRE(swap.timeline.feasible);
  CHECK(span_of(swap, w, StreamId::kD2H, "copy-out f1_out") == Interval{5000, 8000});
  CHECK(span_of(swap, w, StreamId::kCompute, "f2") == Interval{8500, 9500});
  CHECK(span_of(swap, w, StreamId::kH2D, "copy-in f1_out") == Interval{21000, 24000});
  CHECK(span_of(swap, w, StreamId::kCompute, "g2") == Interval{21000, 22000});
  CHECK(span_of(swap, w, StreamId::kCompute, "g1") == Interval{25000, 26000});
  CHECK(swap.timeline.iteration_ns == 26000);
  CHECK(swap.timeline.host_busy_ns == 6 * 4000 + 2 * 500);
  CHECK(swap.timeline.stall_ns() == 0);
  REQUIRE(swap.timeline.host_spans.size() == 8);
  CHECK(swap.timeline.host_spans[1].activity == HostActivity::kLaunch);
  CHECK(swap.timeline.host_spans[1].start_ns == 4000);
  CHECK(swap.timeline.host_spans[1].end_ns == 4500);
}

TEST_CASE("on the same step made GPU-bound the swap pays the copy", "[scenario]") {
  // 100 ns of host time per op: the host runs ahead and the GPU never waits for a launch.
  const Workload w = step(3000, 100, std::nullopt);
  const Machine m = test_machine(kPlenty);

  // In core: f1 is launched at 100 and runs [100,1100]; every later op is launched before the
  // previous one ends, so they run back to back: g1 [5100,6100].
  const auto incore = memplan::test::simulate(w, in_core_plan(w), m);
  CHECK(span_of(incore, w, StreamId::kCompute, "g1") == Interval{5100, 6100});
  CHECK(incore.timeline.iteration_ns == 6100);

  // The copy-out [1100,4100] outlasts f2 [1100,2100]: compute waits 2000 ns to free f1_out, f3
  // runs [4100,5100], g3 [5100,6100]. The prefetch before g2 starts at 6100: copy-in
  // [6100,9100] outlasts g2 [6100,7100] and g1 waits 2000 ns: g1 [9100,10100]. The swap pays the
  // 2 x 3000 ns of copy less the 2 x 1000 ns of one op each overlaps: 10100 = 6100 + 4000.
  const auto swap = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  REQUIRE(swap.timeline.feasible);
  CHECK(span_of(swap, w, StreamId::kD2H, "copy-out f1_out") == Interval{1100, 4100});
  CHECK(span_of(swap, w, StreamId::kCompute, "f3") == Interval{4100, 5100});
  CHECK(span_of(swap, w, StreamId::kH2D, "copy-in f1_out") == Interval{6100, 9100});
  CHECK(span_of(swap, w, StreamId::kCompute, "g1") == Interval{9100, 10100});
  CHECK(swap.timeline.iteration_ns == 10100);
  CHECK(stall(swap.timeline, StallCause::kSwapOut) == 2000);
  CHECK(stall(swap.timeline, StallCause::kSwapIn) == 2000);
}

TEST_CASE("a synchronizing op makes the host wait for the copies in flight", "[scenario]") {
  // CPU-bound (4000 ns per op on the host), f1_out is 6000 bytes, and f2 synchronizes (an
  // `.item()` on its output, say).
  const Workload w = step(6000, 4000, std::nullopt, "f2");
  const Machine m = test_machine(kPlenty);

  // In core: f2 runs [8000,9000] and the host waits for it until 9000; every later op moves by
  // 1000: f3 [13000,14000], ..., g1 [25000,26000].
  const auto incore = memplan::test::simulate(w, in_core_plan(w), m);
  CHECK(span_of(incore, w, StreamId::kCompute, "f3") == Interval{13000, 14000});
  CHECK(incore.timeline.iteration_ns == 26000);
  CHECK(incore.timeline.host_busy_ns == 24000);

  // Swapped: the copy-out runs [5000,11000]; after f2 [8000,9000] the host waits for it, until
  // 11000 (the wait(out) on compute then finds it done: no swap-out stall). f3 is dispatched
  // [11000,15000] and runs [15000,16000]; g3 [19000,20000]; the prefetch with g2's dispatch at
  // 23000: copy-in [23000,29000], g2 [23000,24000]; g1 is launched at 27000 and waits for the map
  // until 29000: g1 [29000,30000].
  const auto swap = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  REQUIRE(swap.timeline.feasible);
  CHECK(span_of(swap, w, StreamId::kD2H, "copy-out f1_out") == Interval{5000, 11000});
  CHECK(span_of(swap, w, StreamId::kCompute, "f3") == Interval{15000, 16000});
  CHECK(span_of(swap, w, StreamId::kH2D, "copy-in f1_out") == Interval{23000, 29000});
  CHECK(span_of(swap, w, StreamId::kCompute, "g1") == Interval{29000, 30000});
  CHECK(swap.timeline.iteration_ns == 30000);
  CHECK(stall(swap.timeline, StallCause::kSwapOut) == 0);
  CHECK(stall(swap.timeline, StallCause::kSwapIn) == 2000);
  const auto sync =
      std::find_if(swap.timeline.host_spans.begin(), swap.timeline.host_spans.end(),
                   [](const HostSpan& s) { return s.activity == HostActivity::kSynchronize; });
  REQUIRE(sync != swap.timeline.host_spans.end());
  CHECK(sync->start_ns == 8000);
  CHECK(sync->end_ns == 11000);
}

TEST_CASE("a synchronizing op's host work before its blocking call overlaps the device",
          "[scenario]") {
  // The in-core step above with f2 synchronizing after sync_after_ns of host work (a foreach
  // optimizer launching its kernels, Python up to `.item()`): f2 is launched at 8000 and runs
  // [8000,9000].
  Workload w = step(6000, 4000, std::nullopt, "f2");
  Op& f2 = w.ops[1];
  REQUIRE(f2.name == "f2");
  const Machine m = test_machine(kPlenty);

  // 500 ns: the host works [8000,8500], then waits for f2 until 9000; f3 is dispatched
  // [9000,13000] and runs [13000,14000] as when the host waited at once, and the step still ends
  // with g1 at 26000. The host is busy 500 ns more (24500).
  f2.host->sync_after_ns = 500;
  const auto shorter = memplan::test::simulate(w, in_core_plan(w), m);
  CHECK(span_of(shorter, w, StreamId::kCompute, "f3") == Interval{13000, 14000});
  CHECK(shorter.timeline.iteration_ns == 26000);
  CHECK(shorter.timeline.host_busy_ns == 24500);
  const auto sync =
      std::find_if(shorter.timeline.host_spans.begin(), shorter.timeline.host_spans.end(),
                   [](const HostSpan& s) { return s.activity == HostActivity::kSynchronize; });
  REQUIRE(sync != shorter.timeline.host_spans.end());
  CHECK(sync->start_ns == 8500);
  CHECK(sync->end_ns == 9000);

  // 1500 ns: f2 has finished (9000) before the blocking call (9500): no wait at all. f3 is
  // dispatched [9500,13500] and runs [13500,14500], each later op 500 ns later than in core: g1
  // [25500,26500]. Had the host waited right after the launch, then worked those 1500 ns, f3
  // would run at 14500.
  f2.host->sync_after_ns = 1500;
  const auto longer = memplan::test::simulate(w, in_core_plan(w), m);
  CHECK(span_of(longer, w, StreamId::kCompute, "f3") == Interval{13500, 14500});
  CHECK(span_of(longer, w, StreamId::kCompute, "g1") == Interval{25500, 26500});
  CHECK(longer.timeline.iteration_ns == 26500);
  CHECK(std::none_of(longer.timeline.host_spans.begin(), longer.timeline.host_spans.end(),
                     [](const HostSpan& s) { return s.activity == HostActivity::kSynchronize; }));
}

TEST_CASE("back to back, a CPU-bound step's period is the host's", "[scenario]") {
  // Note [Step period]. The CPU-bound step of the first test: alone, the host leaves at 24000 and
  // g1 ends at 25000. The next step's host starts at 24000 with the compute stream busy 1000 ns
  // more; its f1 is launched 4000 ns later, long after that backlog drained, so the step repeats
  // exactly (host end 24000, compute end 25000: the same backlog) and the period is 24000, not the
  // 25000 of the step alone. The swap plan repeats the same way: its host leaves at 24000 too.
  const Workload w = step(3000, 4000, std::nullopt);
  const Machine m = test_machine(kPlenty);
  const auto incore = memplan::test::simulate(w, in_core_plan(w), m);
  CHECK(incore.timeline.iteration_ns == 25000);
  CHECK(incore.timeline.host_end_ns == 24000);
  CHECK(incore.timeline.period_ns == 24000);
  const auto swap = memplan::test::simulate(w, plan_with(w, {{"f1_out", Action::kSwap}}), m);
  CHECK(swap.timeline.period_ns == 24000);

  // With f2 synchronizing (the test above), the host waits for f2 each step, so the backlog the
  // previous step left (g1 ends 1000 ns after the host leaves at 25000) is gone by then: f1 runs
  // 4000 ns after the step's start as before. Period 25000 = 26000 alone less g1's 1000 ns.
  const Workload synced = step(6000, 4000, std::nullopt, "f2");
  const auto synced_incore = memplan::test::simulate(synced, in_core_plan(synced), m);
  CHECK(synced_incore.timeline.iteration_ns == 26000);
  CHECK(synced_incore.timeline.period_ns == 25000);
}

TEST_CASE("back to back, a GPU-bound step's period is the GPU's", "[scenario]") {
  // The GPU-bound step (100 ns of host per op): alone, the host leaves at 600 and g1 ends at 6100.
  // Each next step starts 600 ns after the previous one on the host but queues behind its six
  // 1000 ns ops: the backlog grows by 5400 ns a step, and the device ends 6000 ns later each step.
  // The period is the GPU's busy time, 6000 (the step alone: 6100, its first launch included).
  const Workload w = step(3000, 100, std::nullopt);
  const auto s = memplan::test::simulate(w, in_core_plan(w), test_machine(kPlenty));
  CHECK(s.timeline.iteration_ns == 6100);
  CHECK(s.timeline.host_end_ns == 600);
  CHECK(s.timeline.period_ns == 6000);
}

TEST_CASE("back to back, the host runs an update on the host before the next step", "[scenario]") {
  // f1 {x, w} and g1 -> gw, 1000 ns each, then sgd {w, gw, m} on the host (ZeRO-Offload's plan:
  // gw and m on the host, w's master copy there); 100 ns of host time per op, 1 GB/s everywhere.
  // The host dispatches f1, g1, sgd by 300; f1 runs 100..1100, g1 1100..2100, gw's copy-out
  // 2100..3124; the run reads w, m (twice each: read and written back) and gw, 11,264 B at
  // 1 GB/s: 3124..14,388; w's master comes back 14,388..15,412, which the compute stream waits
  // for. The dispatching thread runs the update (Note [Host stream]): from 300 it waits for gw,
  // then runs, and leaves at 14,388. The next step starts there, its f1 dispatched at +100 but
  // waiting for w until 15,412: the steps repeat every 15,312 ns (the step alone: 15,412).
  // Before, the host left at 300 and dispatched the next step beside the run: 11,264 a step.
  WorkloadBuilder b;
  const auto x = b.input("x", 1024);
  const auto wt = b.parameter("w", 1024);
  const auto mt = b.optimizer_state("m", 4096);
  const auto a = b.forward("f1", {x, wt}, 1024, 1000);
  const auto gw = b.backward("g1", {a}, 1024, 1000);
  b.op("sgd", "sgd", Phase::kUpdate, {wt, gw, mt}, {}, 8000);
  for (Op& op : b.workload().ops) op.host = HostSide{100};
  const Workload w = b.build();
  Machine m = test_machine(kPlenty);
  m.host_bandwidth_bytes_per_s = 1e9;
  const auto s = memplan::test::simulate(w, memplan::test::zero_offload_plan(w), m);
  REQUIRE(s.timeline.feasible);
  CHECK(span_of(s, w, StreamId::kHost, "sgd (host)") == Interval{3124, 14388});
  CHECK(s.timeline.host_end_ns == 14388);
  CHECK(s.timeline.iteration_ns == 15412);
  CHECK(s.timeline.period_ns == 15312);
  const auto update =
      std::find_if(s.timeline.host_spans.begin(), s.timeline.host_spans.end(),
                   [](const HostSpan& h) { return h.activity == HostActivity::kHostUpdate; });
  REQUIRE(update != s.timeline.host_spans.end());
  CHECK(update->start_ns == 300);
  CHECK(update->end_ns == 14388);
}

TEST_CASE("without a host side the step is the device's alone", "[scenario]") {
  // One op, 1000 ns, no host side recorded: it runs [0,1000] and the host is not modelled.
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  b.forward("f1", {x}, 100, 1000);
  const Workload w = b.build();
  const auto s = memplan::test::simulate(w, in_core_plan(w), test_machine(kPlenty));
  CHECK(s.timeline.iteration_ns == 1000);
  CHECK(s.timeline.period_ns == 1000);  // nothing overlaps the next step without a host
  CHECK(s.timeline.host_busy_ns == 0);
  CHECK(s.timeline.host_spans.empty());
  CHECK_FALSE(s.program.host.active());
}

TEST_CASE("the exports show the host", "[scenario]") {
  // The CPU-bound step in core (first test): the host dispatches 6 ops of 4000 ns, the GPU is idle
  // 0.76 of the 25000 ns step.
  const Workload w = step(3000, 4000, std::nullopt);
  const Machine m = test_machine(kPlenty);
  const auto s = memplan::test::simulate(w, in_core_plan(w), m);
  const auto trace = nlohmann::json::parse(chrome_trace_json(s.timeline, s.program, w));
  int host_track = -1;
  int dispatches = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("args").at("name") == "host") {
      host_track = e.at("tid");
    }
  }
  REQUIRE(host_track >= 0);
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("tid") == host_track && e.at("cat") == "dispatch") ++dispatches;
  }
  CHECK(dispatches == 6);
  const nlohmann::json j = summary_json(s.timeline, s.program, w, m);
  CHECK(j.at("host_busy_s").get<double>() == Approx(24000e-9));
  CHECK(j.at("gpu_idle_share").get<double>() == Approx(0.76));
}
