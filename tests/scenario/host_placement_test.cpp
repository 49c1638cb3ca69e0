// Golden timelines of plans that place parameters, gradients and optimizer state on the host
// (Note [Host placement] in core/plan.hpp). Links at 1 GB/s (1 byte per ns) without latency, the
// host update at 10 GB/s (10 bytes per ns); every number is worked out in the comments.
#include <algorithm>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "io/plan_io.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::span_labels;
using memplan::test::span_of;
using memplan::test::test_machine;
using memplan::test::WorkloadBuilder;
using Interval = std::pair<Nanoseconds, Nanoseconds>;

namespace {

// Two linear layers and SGD with momentum, ids in brackets:
//   f1 [op 0]: x[0] (100 B), w1[1] (1000) -> a[3] (100)        1000 ns
//   f2 [op 1]: a, w2[2] (1000) -> y[4] (100)                    1000 ns
//   g2 [op 2]: y, a, w2 -> g_w2[5] (1000), d_a[6] (100)         1000 ns
//   g1 [op 3]: d_a, x, w1 -> g_w1[7] (1000)                     1000 ns
//   sgd [op 4]: w1, w2, g_w1, g_w2, m1[8], m2[9] (1000 each)     500 ns on the device
Workload two_layers() {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto w1 = b.parameter("w1", 1000);
  const auto w2 = b.parameter("w2", 1000);
  const auto a = b.forward("f1", {x, w1}, 100, 1000);
  const auto y = b.forward("f2", {a, w2}, 100, 1000);
  b.op("g2", "linear", Phase::kBackward, {y, a, w2}, {{"g_w2", 1000}, {"d_a", 100}}, 1000);
  const TensorId g_w2{5};
  const TensorId d_a{6};
  b.op("g1", "linear", Phase::kBackward, {d_a, x, w1}, {{"g_w1", 1000}}, 1000);
  const TensorId g_w1{7};
  const std::vector<TensorId> momenta{b.optimizer_state("m1", 1000), b.optimizer_state("m2", 1000)};
  b.op("sgd", "sgd", Phase::kUpdate, {w1, w2, g_w1, g_w2, momenta[0], momenta[1]}, {}, 500);
  return b.build();
}

Plan with_host(const Workload& w, std::vector<TensorId> host, bool host_update) {
  Plan plan = in_core_plan(w);
  plan.host_tensors = std::move(host);
  plan.host_update = host_update;
  validate_plan(plan, w, "test plan");
  return plan;
}

Machine machine() {
  Machine m = test_machine(Bytes{1} << 30);
  m.host_bandwidth_bytes_per_s = 10e9;
  return m;
}

Bytes live_at_end(const Timeline& tl) {
  return tl.memory.back().live_bytes;
}

}  // namespace

TEST_CASE("in core, the two-layer step holds its weights and momenta throughout", "[scenario]") {
  const Workload w = two_layers();
  const auto s = memplan::test::simulate(w, in_core_plan(w), machine());
  // x, w1, w2, m1, m2 from the start (4100 B); at g1 the live set is those, g_w2 (kept for the
  // update), d_a and the new g_w1: 4100 + 1000 + 100 + 1000 = 6200. Every op back to back: 4500 ns.
  REQUIRE(s.timeline.feasible);
  CHECK(s.timeline.peak_bytes == 6200);
  CHECK(s.timeline.iteration_ns == 4500);
  CHECK(live_at_end(s.timeline) == 4000);  // weights and momenta outlive the step
}

TEST_CASE("fsdp-style offload: weights per phase, gradients and momenta on the host",
          "[scenario]") {
  const Workload w = two_layers();
  // w1, w2, g_w2, g_w1, m1, m2 on the host; the update on the host.
  const auto s = memplan::test::simulate(
      w,
      with_host(w, {TensorId{1}, TensorId{2}, TensorId{5}, TensorId{7}, TensorId{8}, TensorId{9}},
                true),
      machine());
  REQUIRE(s.timeline.feasible);
  // Prefetches, the one needed first first at an op: before f1 (op 0, the first use) w1 then w2
  // (f2's, one op ahead): [0,1000], [1000,2000]. f1 waits for w1: [1000,2000]; f2 [2000,3000].
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w1") == Interval{0, 1000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w2") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kCompute, "f1") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kCompute, "f2") == Interval{2000, 3000});
  // Backward copies are issued at g2 (the op before g1 is g2, which is w2's own first backward
  // use): w2 [3000,4000] then w1 [4000,5000]. g2 waits for w2: [4000,5000]; g1 [5000,6000].
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w2", 1) == Interval{3000, 4000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w1", 1) == Interval{4000, 5000});
  CHECK(span_of(s, w, StreamId::kCompute, "g2") == Interval{4000, 5000});
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{5000, 6000});
  // Gradients go out as they are written: g_w2 [5000,6000], g_w1 [6000,7000]. g_w2's device copy
  // is freed after g1 (the op after its producer), where its copy-out has just ended.
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out g_w2") == Interval{5000, 6000});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out g_w1") == Interval{6000, 7000});
  // The host update waits for g_w1 on the host (7000) and streams w1, w2, m1, m2 twice (read and
  // written) and both gradients once: 10,000 B at 10 B/ns = 1000 ns: [7000,8000].
  CHECK(span_of(s, w, StreamId::kHost, "sgd (host)") == Interval{7000, 8000});
  CHECK(s.timeline.iteration_ns == 8000);
  // Compute ran 4 ops (the update is not its own): 4000 ns; it waited for w1 (1000) and w2 (1000)
  // and, at the step's end, for g_w1's copy-out before freeing it (6000 -> 7000).
  CHECK(s.timeline.op_compute_ns == 4000);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapIn)] == 2000);
  CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapOut)] == 1000);
  // Device memory: x (100) at the start; op 0 w1 + w2 + a = 2200; f1 frees w1 and f2 w2 (after
  // y: 1300), leaving x, a, y = 300; at g2 w2 + w1 + g_w2 + d_a: 300 + 3100 = 3400, the peak.
  // The step ends with nothing on the device: weights and momenta live on the host.
  CHECK(s.timeline.peak_bytes == 3400);
  CHECK(live_at_end(s.timeline) == 0);
  // Host: w1, w2, m1, m2 all along (4000), g_w2 from 5000 and g_w1 from 6000 on: 6000.
  CHECK(s.timeline.peak_host_bytes == 6000);
}

TEST_CASE("zero-offload: gradients and momenta on the host, updated weights copied back",
          "[scenario]") {
  const Workload w = two_layers();
  const auto s = memplan::test::simulate(
      w, with_host(w, {TensorId{5}, TensorId{7}, TensorId{8}, TensorId{9}}, true), machine());
  REQUIRE(s.timeline.feasible);
  // The weights stay on the device: f1 [0,1000], f2 [1000,2000], g2 [2000,3000], g1 [3000,4000].
  // g_w2 goes out [3000,4000], g_w1 [4000,5000]; the host update [5000,6000] (the weights' master
  // copies count twice, as above: 10,000 B); then the h2d stream, after compute's last read of the
  // weights (4000) and the update, copies w1 [6000,7000] and w2 [7000,8000] into their buffers.
  CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{3000, 4000});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out g_w1") == Interval{4000, 5000});
  CHECK(span_of(s, w, StreamId::kHost, "sgd (host)") == Interval{5000, 6000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w1") == Interval{6000, 7000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w2") == Interval{7000, 8000});
  CHECK(s.timeline.iteration_ns == 8000);
  // Device: x, w1, w2 (2100) + a + y = 2300; g2 adds g_w2 and d_a (3400) and frees y and a (3200);
  // g1 adds g_w1: 4200, the peak. The step ends with the weights only (2000), not the momenta.
  CHECK(s.timeline.peak_bytes == 4200);
  CHECK(live_at_end(s.timeline) == 2000);
  // Host: master copies of w1, w2 and m1, m2 (4000) plus both gradients: 6000.
  CHECK(s.timeline.peak_host_bytes == 6000);
}

TEST_CASE("an update on the device brings host-placed momenta in and writes them back",
          "[scenario]") {
  const Workload w = two_layers();
  const auto s =
      memplan::test::simulate(w, with_host(w, {TensorId{8}, TensorId{9}}, false), machine());
  REQUIRE(s.timeline.feasible);
  // m1 and m2 are prefetched at g1 (the op before sgd): [3000,4000], [4000,5000]; sgd waits for
  // m2: [5000,5500]; then both are copied back out, [5500,6500] and [6500,7500], and the compute
  // stream frees them once the copy-outs have read them: 7500.
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in m1") == Interval{3000, 4000});
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in m2") == Interval{4000, 5000});
  CHECK(span_of(s, w, StreamId::kCompute, "sgd") == Interval{5000, 5500});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out m1") == Interval{5500, 6500});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out m2") == Interval{6500, 7500});
  CHECK(s.timeline.iteration_ns == 7500);
  // Device: the momenta are off the device until g1, but prefetched one op ahead they are back
  // for g1: x, w1, w2, g_w2, d_a, m1, m2, g_w1 = 6200, the in-core peak. The step ends with the
  // weights only (2000).
  CHECK(s.timeline.peak_bytes == 6200);
  CHECK(live_at_end(s.timeline) == 2000);
}

TEST_CASE("a host-placed weight's backward prefetch moved to its use: less memory, later step",
          "[scenario]") {
  const Workload w = two_layers();
  Plan plan = with_host(
      w, {TensorId{1}, TensorId{2}, TensorId{5}, TensorId{7}, TensorId{8}, TensorId{9}}, true);
  // w1 is read by f1 [op 0] (forward) and g1 [op 3] (backward); the update reads its slot. Its
  // backward copy may be prefetched from f2 [op 1] (the forward copy is dropped after f1) to g1;
  // by default at g2 [op 2], one op ahead of g1.
  const TensorId w1{1};
  const std::vector<HostUseGroup> groups = host_use_groups(w1, true, w);
  REQUIRE(groups == std::vector<HostUseGroup>{{OpId{0}, OpId{0}, OpId{0}, OpId{0}},
                                              {OpId{3}, OpId{3}, OpId{1}, OpId{2}}});
  SECTION("at its use") {
    plan.host_prefetches = {{w1, OpId{3}, OpId{3}}};
    validate_plan(plan, w, "test plan");
    const auto s = memplan::test::simulate(w, plan, machine());
    REQUIRE(s.timeline.feasible);
    // Forward as with the default (fsdp test above): copies of w1 [0,1000] and w2 [1000,2000],
    // f1 [1000,2000], f2 [2000,3000]. At g2 only w2 is prefetched: [3000,4000] (compute reaches
    // g2 at 3000); g2 waits for it, [4000,5000]. w1's copy is issued at g1, once compute has run
    // g2: [5000,6000]; g1 waits for it: [6000,7000], 1000 ns later than by default.
    CHECK(span_of(s, w, StreamId::kH2D, "copy-in w2", 1) == Interval{3000, 4000});
    CHECK(span_of(s, w, StreamId::kCompute, "g2") == Interval{4000, 5000});
    CHECK(span_of(s, w, StreamId::kH2D, "copy-in w1", 1) == Interval{5000, 6000});
    CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{6000, 7000});
    // g_w1 goes out [7000,8000]; compute waits for it at sgd to free its copy (7000 -> 8000); the
    // host update waits for it too and runs 1000 ns (10,000 B at 10 B/ns): [8000,9000].
    CHECK(span_of(s, w, StreamId::kD2H, "copy-out g_w1") == Interval{7000, 8000});
    CHECK(span_of(s, w, StreamId::kHost, "sgd (host)") == Interval{8000, 9000});
    CHECK(s.timeline.iteration_ns == 9000);
    // Stalls for copies in: f1 for w1 (1000), g2 for w2 (1000), g1 for w1 (1000).
    CHECK(s.timeline.stall_ns_by_cause[static_cast<int>(StallCause::kSwapIn)] == 3000);
    // Device memory: forward 2200 at f1 (x, w1, w2, a) as by default. At g2, w1 is not there:
    // x, a, y (300) + w2 + g_w2 + d_a = 2400 (the default's peak, 3400, held w1 too). After g2, a,
    // y and w2 go (1200: x, g_w2, d_a); at g1 w1 comes and g_w1 is written: 1200 + 2000 = 3200,
    // the peak (g_w2's copy goes after g1, its copy-out ended at 6000).
    CHECK(s.timeline.peak_bytes == 3200);
  }
  SECTION("at the start of its window") {
    plan.host_prefetches = {{w1, OpId{3}, OpId{1}}};
    validate_plan(plan, w, "test plan");
    const auto s = memplan::test::simulate(w, plan, machine());
    REQUIRE(s.timeline.feasible);
    // Issued before f2, where compute arrives at 2000 (after f1), behind w2's forward copy on the
    // h2d stream: [2000,3000]. Then w2's backward copy at g2: [3000,4000]. Compute does not wait
    // for it more than by default: g2 [4000,5000], g1 [5000,6000], the step 8000 ns.
    CHECK(span_of(s, w, StreamId::kH2D, "copy-in w1", 1) == Interval{2000, 3000});
    CHECK(span_of(s, w, StreamId::kH2D, "copy-in w2", 1) == Interval{3000, 4000});
    CHECK(span_of(s, w, StreamId::kCompute, "g1") == Interval{5000, 6000});
    CHECK(s.timeline.iteration_ns == 8000);
    // Memory: at f2, x, a, w2, w1 and y: 2300, below g2's 3400 (as by default), the peak.
    CHECK(s.timeline.peak_bytes == 3400);
  }
  SECTION("outside its window, or naming no group, it is refused") {
    plan.host_prefetches = {{w1, OpId{3}, OpId{0}}};  // before f1: the forward copy is there
    CHECK_THROWS_AS(validate_plan(plan, w, "p"), InputError);
    plan.host_prefetches = {{w1, OpId{4}, OpId{3}}};  // sgd reads w1's slot, on the host
    CHECK_THROWS_AS(validate_plan(plan, w, "p"), InputError);
    plan.host_prefetches = {{TensorId{0}, OpId{3}, OpId{3}}};  // x is on the device
    CHECK_THROWS_AS(validate_plan(plan, w, "p"), InputError);
  }
}

TEST_CASE("host placement is validated and round-trips through plan files", "[scenario]") {
  const Workload w = two_layers();
  Plan bad = in_core_plan(w);
  bad.host_update = true;  // momenta and gradients still on the device
  CHECK_THROWS_AS(validate_plan(bad, w, "p"), InputError);
  bad.host_tensors = {TensorId{3}};  // a, a feature map
  bad.host_update = false;
  CHECK_THROWS_AS(validate_plan(bad, w, "p"), InputError);
  const Plan fsdp = with_host(
      w, {TensorId{1}, TensorId{2}, TensorId{5}, TensorId{7}, TensorId{8}, TensorId{9}}, true);
  const std::string text = write_plan(fsdp, w);
  CHECK(text.find(R"({"tensor":"g_w1","placement":"host"})") != std::string::npos);
  CHECK(parse_plan(text, "round trip", w) == fsdp);
  // Groups' prefetch points travel in their tensor's entry, ops by name.
  Plan moved = fsdp;
  moved.host_prefetches = {{TensorId{1}, OpId{3}, OpId{3}}, {TensorId{2}, OpId{1}, OpId{1}}};
  validate_plan(moved, w, "moved");
  const std::string moved_text = write_plan(moved, w);
  CHECK(moved_text.find(R"({"tensor":"w1","placement":"host","prefetches":[{"first_use":"g1",)"
                        R"("prefetch_before":"g1"}]})") != std::string::npos);
  CHECK(parse_plan(moved_text, "round trip", w) == moved);
  CHECK(write_plan(parse_plan(moved_text, "round trip", w), w) == moved_text);
  // A plan file without the new entries reads as before: everything on the device.
  const Plan plain = parse_plan(write_plan(in_core_plan(w), w), "plain", w);
  CHECK(plain.host_tensors.empty());
  CHECK_FALSE(plain.host_update);
}

namespace {

// One linear layer and Adam's update as PyTorch's single-tensor Adam runs it, ids in brackets:
//   f [op 0]: x[0] (100 B), w[1] (1000) -> y[2] (100)                1000 ns
//   g [op 1]: y, x, w -> g_w[3] (1000)                                1000 ns
//   lerp_ [op 2]: m[4], g_w      (m updated in place)                  100 ns on the device
//   addcmul_ [op 3]: v[5], g_w   (v updated in place)                  100
//   sqrt [op 4]: v -> s[6] (1000)                                      100
//   div [op 5]: s -> d[7] (1000)                                       100
//   add_ [op 6]: d -> e[8] (1000, written over d)                      100
//   addcdiv_ [op 7]: w, m, e     (w updated in place)                  100
// s, d and e are the update's temporaries (activations an update op writes, as memplan.torch
// records them). With `unread_e`, nothing reads e: addcdiv_ [op 8] reads t[9] (3000) instead, which
// mul [op 7] makes from m.
Workload adam_layer(bool unread_e = false) {
  WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto w = b.parameter("w", 1000);
  const auto y = b.forward("f", {x, w}, 100, 1000);
  const auto g_w = b.backward("g", {y, x, w}, 1000, 1000);
  b.workload().tensors[index(y)].name = "y";
  b.workload().tensors[index(g_w)].name = "g_w";
  const std::vector<TensorId> state{b.optimizer_state("m", 1000), b.optimizer_state("v", 1000)};
  const TensorId m = state[0];
  const TensorId v = state[1];
  auto update = [&](const char* name, std::vector<TensorId> inputs, const char* out) {
    const OpId op = b.op(name, name, Phase::kUpdate, inputs,
                         out == nullptr ? std::vector<std::pair<std::string, Bytes>>{}
                                        : std::vector<std::pair<std::string, Bytes>>{{out, 1000}},
                         100);
    if (out == nullptr) return kNoTensor;
    Tensor& t = b.workload().tensors.back();
    t.kind = TensorKind::kActivation;
    return b.workload().op(op).outputs.front();
  };
  update("lerp_", {m, g_w}, nullptr);
  update("addcmul_", {v, g_w}, nullptr);
  const TensorId s = update("sqrt", {v}, "s");
  const TensorId d = update("div", {s}, "d");
  const TensorId e = update("add_", {d}, "e");
  b.workload().tensors[index(e)].in_place_of = d;
  if (unread_e) {
    b.op("mul", "mul", Phase::kUpdate, {m}, {{"t", 3000}}, 100);
    b.workload().tensors.back().kind = TensorKind::kActivation;
    update("addcdiv_", {w, m, b.workload().tensors.back().id}, nullptr);
  } else {
    update("addcdiv_", {w, m, e}, nullptr);
  }
  return b.build();
}

const TensorId kGw{3};
const TensorId kM{4};
const TensorId kV{5};

}  // namespace

TEST_CASE("adam on the host: its temporaries in host memory from their op to their last reader",
          "[scenario]") {
  const Workload w = adam_layer();
  const Plan plan = with_host(w, {kGw, kM, kV}, true);
  const auto s = memplan::test::simulate(w, plan, machine());
  REQUIRE(s.timeline.feasible);
  // The device runs f [0,1000] and g [1000,2000]; g_w goes out as it is written: [2000,3000].
  // Compute reaches the update at 2000 and frees g_w's copy after lerp_ (its first update use),
  // once its copy-out has ended: 3000.
  CHECK(span_of(s, w, StreamId::kCompute, "g") == Interval{1000, 2000});
  CHECK(span_of(s, w, StreamId::kD2H, "copy-out g_w") == Interval{2000, 3000});
  // The host runs each update op once compute has reached it, the first once g_w is out too,
  // streaming what it reads (m, v and w's master copy, resident: twice, read and written back; g_w
  // and the temporaries once) and what it makes, at 10 B/ns: lerp_ m, g_w 3000 B [3000,3300];
  // addcmul_ v, g_w 3000 [3300,3600]; sqrt v, s 3000 [3600,3900]; div s, d 2000 [3900,4100]; add_ d
  // and e (d's slot) 2000 [4100,4300]; addcdiv_ w, m, e 5000 [4300,4800].
  CHECK(span_labels(s, w, StreamId::kHost) ==
        std::vector<std::string>{"lerp_ (host)", "addcmul_ (host)", "sqrt (host)", "div (host)",
                                 "add_ (host)", "addcdiv_ (host)"});
  CHECK(span_of(s, w, StreamId::kHost, "lerp_ (host)") == Interval{3000, 3300});
  CHECK(span_of(s, w, StreamId::kHost, "sqrt (host)") == Interval{3600, 3900});
  CHECK(span_of(s, w, StreamId::kHost, "div (host)") == Interval{3900, 4100});
  CHECK(span_of(s, w, StreamId::kHost, "add_ (host)") == Interval{4100, 4300});
  CHECK(span_of(s, w, StreamId::kHost, "addcdiv_ (host)") == Interval{4300, 4800});
  // addcdiv_ updated w's master copy: it goes to w's device buffer after it, [4800,5800].
  CHECK(span_of(s, w, StreamId::kH2D, "copy-in w") == Interval{4800, 5800});
  CHECK(s.timeline.iteration_ns == 5800);
  CHECK(s.timeline.op_compute_ns == 2000);
  // Host memory: m, v and w's master copy all along (3000); g_w from 2000 (4000); s from sqrt's
  // start, 3600 (5000); d from div's start, 3900 (6000), the peak; s goes when div ends (4100:
  // 5000); e is written over d in d's slot, and that slot goes when addcdiv_, its last reader,
  // ends (4800: 4000).
  CHECK(s.timeline.peak_host_bytes == 6000);
  const Program& p = s.program;
  std::vector<std::string> temporaries;
  for (const HostSlot& slot : p.host_slots) {
    if (slot.temporary) temporaries.push_back(w.tensor(slot.tensor).name);
  }
  CHECK(temporaries == std::vector<std::string>{"s", "d"});
  const auto& host = p.stream(StreamId::kHost);
  const auto add = std::find_if(host.begin(), host.end(), [&](const Instruction& in) {
    return in.kind == InstrKind::kHostRun && w.op(in.op).name == "add_";
  });
  REQUIRE(add != host.end());
  CHECK(p.operand_slot(*add, 0) == p.operand_slot(*add, 1));  // d in, e out: one slot
  // Device memory: x and w (1100), y at f (1200), g_w at g: 2200, the peak; then y and x go
  // (2000) and g_w after lerp_ (1000: w). The temporaries never take a device buffer, nor do m
  // and v. On the device the same update peaks at 5000: w, m and v (3000) with s and d at div
  // (g_w went after addcmul_, its last reader), above g's 4200 (x, w, m, v, y, g_w).
  CHECK(s.timeline.peak_bytes == 2200);
  CHECK(live_at_end(s.timeline) == 1000);
  for (const Buffer& buffer : p.buffers) CHECK(buffer.tensor < TensorId{6});
  const auto on_device = memplan::test::simulate(w, with_host(w, {}, false), machine());
  CHECK(on_device.timeline.peak_bytes == 5000);
}

TEST_CASE("a host temporary written over in place and never read goes once", "[scenario]") {
  // adam_layer with e read by nothing: addcdiv_ [op 8] reads t[9] (3000 B), which mul [op 7]
  // makes from m after add_, the last run naming d's slot (twice: d in, e out).
  const Workload w = adam_layer(true);
  const auto s = memplan::test::simulate(w, with_host(w, {kGw, kM, kV}, true), machine());
  REQUIRE(s.timeline.feasible);
  // As above up to add_ [4100,4300], where d's slot goes: m, v, w's master copy and g_w, 4000.
  // mul streams m twice and writes t: 5000 B [4300,4800]; t is taken at 4300: 7000, the peak (d's
  // slot let go twice would leave 6000). addcdiv_ streams w's master and m twice and t: 7000 B
  // [4800,5500], and t goes at its end.
  CHECK(span_of(s, w, StreamId::kHost, "mul (host)") == Interval{4300, 4800});
  CHECK(span_of(s, w, StreamId::kHost, "addcdiv_ (host)") == Interval{4800, 5500});
  CHECK(s.timeline.peak_host_bytes == 7000);
}

TEST_CASE("a host update is refused, in one line, where it cannot run", "[scenario]") {
  auto problem = [](const Workload& w, std::vector<TensorId> host) {
    Plan plan = in_core_plan(w);
    plan.host_tensors = std::move(host);
    plan.host_update = true;
    return host_update_problem(plan, w);
  };
  CHECK(problem(adam_layer(), {kGw, kM, kV}).empty());
  CHECK(problem(adam_layer(), {kGw, kM}) ==
        "update op 'addcmul_' runs on the host but reads 'v' (optimizer_state) on the device: "
        "place it on the host");
  {  // addcdiv_ reads y, a forward activation left on the device
    Workload w = adam_layer();
    w.ops[7].inputs.push_back(TensorId{2});
    CHECK(problem(w, {kGw, kM, kV}) ==
          "update op 'addcdiv_' runs on the host but reads 'y' (activation, written by forward "
          "op 'f'), which stays on the device: a host update reads tensors from before the step, "
          "host-placed gradients and what its own ops write");
  }
  {  // div writes over y, a forward activation, in place
    Workload w = adam_layer();
    w.tensors[7].in_place_of = TensorId{2};
    w.ops[5].inputs.push_back(TensorId{2});
    CHECK(problem(w, {kGw, kM, kV}).find("update op 'div' runs on the host but reads 'y'") == 0);
    w.ops[5].inputs.pop_back();
    CHECK(problem(w, {kGw, kM, kV}) ==
          "update op 'div' writes 'd' over 'y' (activation), which no update op made: a host "
          "update writes new versions only of its own temporaries");
  }
  {  // a backward op after the update
    WorkloadBuilder b;
    const auto x = b.input("x", 100);
    const auto p = b.parameter("p", 100);
    const auto y = b.forward("f", {x, p}, 100, 10);
    const auto g = b.backward("g", {y, x}, 100, 10);
    b.op("sgd", "sgd", Phase::kUpdate, {p, g}, {}, 10);
    b.op("late", "linear", Phase::kBackward, {y}, {{"z", 100}}, 10);
    CHECK(problem(b.build(), {g}) ==
          "op 'late' (backward) runs after the update: a host update ends the step");
  }
}
