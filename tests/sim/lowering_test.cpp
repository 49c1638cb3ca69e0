#include <algorithm>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/liveness.hpp"
#include "io/trace_io.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;

namespace {
Workload trace(const std::string& name) {
  return read_trace(memplan::test::source_path("traces/" + name));
}

std::size_t count(const Program& p, StreamId s, InstrKind kind) {
  std::size_t n = 0;
  for (const Instruction& in : p.stream(s)) n += in.kind == kind ? 1 : 0;
  return n;
}

// regenerated_frees of the in-core plan of `w` with the maps `recomputed` recomputed.
std::vector<RegeneratedFree> frees_recomputing(const Workload& w,
                                               const std::vector<TensorId>& recomputed) {
  Plan plan = in_core_plan(w);
  for (Decision& d : plan.decisions) {
    if (std::find(recomputed.begin(), recomputed.end(), d.tensor) != recomputed.end())
      d.action = Action::kRecompute;
  }
  return regenerated_frees(w, lower(w, plan));
}
}  // namespace

TEST_CASE("in-core programs reproduce the liveness peak of the shipped traces", "[sim][lowering]") {
  for (const char* name : {"mlp4.json", "resnet_tiny.json"}) {
    CAPTURE(name);
    const Workload w = trace(name);
    const Program p = lower(w, in_core_plan(w));
    CHECK(count(p, StreamId::kCompute, InstrKind::kRun) == w.ops.size());
    CHECK(p.stream(StreamId::kD2H).empty());
    CHECK(p.stream(StreamId::kH2D).empty());
    Engine engine;
    Machine m = make_machine(w.device);
    m.memory_bytes *= 4;
    const Timeline& tl = engine.run(p, m);
    REQUIRE(tl.feasible);
    CHECK(tl.peak_bytes == incore_peak(w).bytes);
    CHECK(tl.iteration_ns == p.op_compute_ns);
  }
}

TEST_CASE("swap-all copies every map out and back once", "[sim][lowering]") {
  const Workload w = trace("resnet_tiny.json");
  const Program p = lower(w, swap_all_plan(w));
  CHECK(count(p, StreamId::kD2H, InstrKind::kCopyOut) == 6);
  CHECK(count(p, StreamId::kH2D, InstrKind::kCopyIn) == 6);
  CHECK(p.host_slots.size() == 6);
  CHECK(p.action_counts[static_cast<std::size_t>(Action::kSwap)] == 6);
}

TEST_CASE("recompute regenerates in-place chains from their root", "[sim][lowering]") {
  // relu1_out is written in place over conv1_out: regenerating it reruns conv1 into a fresh buffer,
  // then relu1 over that buffer.
  const Workload w = trace("resnet_tiny.json");
  Plan plan = in_core_plan(w);
  for (Decision& d : plan.decisions) {
    if (w.tensor(d.tensor).name == "relu1_out") d.action = Action::kRecompute;
  }
  const Program p = lower(w, plan);
  std::vector<std::string> recomputed;
  for (const Instruction& in : p.stream(StreamId::kCompute)) {
    if (in.kind == InstrKind::kRecompute) recomputed.push_back(w.op(in.op).name);
  }
  CHECK(recomputed == std::vector<std::string>{"conv1", "relu1"});
  Engine engine;
  Machine m = make_machine(w.device);
  const Timeline& tl = engine.run(p, m);
  REQUIRE(tl.feasible);
  CHECK(tl.stall_ns_by_cause[static_cast<std::size_t>(StallCause::kRecompute)] ==
        w.ops[0].duration_ns + w.ops[1].duration_ns);
}

TEST_CASE("every basic plan runs on the shipped traces and lowers deterministically",
          "[sim][lowering]") {
  for (const char* name : {"mlp4.json", "resnet_tiny.json"}) {
    const Workload w = trace(name);
    for (auto policy : basic_plan_names()) {
      CAPTURE(name, policy);
      const Plan plan = *basic_plan(policy, w);
      const Program a = lower(w, plan);
      const Program b = lower(w, plan);
      CHECK(a.instruction_count() == b.instruction_count());
      CHECK(a.operands == b.operands);
      Engine engine;
      Machine m = make_machine(w.device);
      m.memory_bytes *= 4;
      CHECK(engine.run(a, m).feasible);
    }
  }
}

TEST_CASE("recomputing a very deep chain needs no deep recursion", "[sim][lowering]") {
  // The first backward op needs the last map, which needs every map before it: 30000 re-runs in
  // one regeneration (recursion this deep overflows the stack; the lowering uses its own stack).
  constexpr int kDepth = 30000;
  memplan::test::WorkloadBuilder b;
  std::vector<TensorId> maps = {b.input("x", 512)};
  for (int i = 0; i < kDepth; ++i)
    maps.push_back(b.forward(fmt::format("f{}", i), {maps.back()}, 512, 1));
  TensorId grad = b.backward("loss_bwd", {maps.back()}, 512, 1);
  for (int i = kDepth - 1; i >= 0; --i) {
    grad = b.backward(fmt::format("g{}", i), {grad, maps[static_cast<std::size_t>(i)]}, 512, 1);
  }
  const Workload w = b.build();
  const Program p = lower(w, recompute_all_plan(w));
  std::size_t recomputes = 0;
  for (const Instruction& in : p.stream(StreamId::kCompute))
    recomputes += in.kind == InstrKind::kRecompute;
  CHECK(recomputes == kDepth);
  Engine engine;
  Machine m = make_machine(w.device);
  const Timeline& tl = engine.run(p, m);
  CHECK(tl.feasible);
  CHECK(tl.stall_ns_by_cause[static_cast<std::size_t>(StallCause::kRecompute)] == kDepth);
}

TEST_CASE("a copy regenerated on the way is freed after the re-run that reads it last",
          "[sim][lowering]") {
  // x -> f1 -> a, read by f2 (-> b) and f3 (-> c) only: a is no map. Recomputing b and c, g3's
  // regeneration of c re-runs f1 (a comes back) then f3; g2's of b finds a still there and
  // re-runs f2, a's last reference: its copy is freed after f2's first re-run, which
  // regenerated_frees says. With an in-place op after f1 (a written over by r1), the buffer's last
  // version is r1's output, the tensor it names.
  for (const bool in_place : {false, true}) {
    CAPTURE(in_place);
    memplan::test::WorkloadBuilder b;
    const TensorId x = b.input("x", 1024);
    TensorId a = b.forward("f1", {x}, 1024, 10);
    if (in_place) a = b.forward_in_place("r1", a, 10);
    const TensorId bm = b.forward("f2", {a}, 1024, 10);
    const OpId f2 = b.last_op();
    const TensorId c = b.forward("f3", {a}, 1024, 10);
    const TensorId d = b.forward("f4", {bm, c}, 1024, 10);
    TensorId g = b.backward("g4", {d}, 1024, 10);
    g = b.backward("g3", {g, c}, 1024, 10);
    b.backward("g2", {g, bm}, 1024, 10);
    const std::vector<RegeneratedFree> frees = frees_recomputing(b.build(), {bm, c});
    REQUIRE(frees.size() == 1);
    CHECK(frees[0].tensor == a);
    CHECK(frees[0].rerun == f2);
    CHECK(frees[0].occurrence == 0);
  }
}

TEST_CASE("a kept map a re-run writes again after its last use is freed after that re-run",
          "[sim][lowering]") {
  // f1 writes m (recomputed) and k (kept); k's last use, gk, comes before m's, gm. Regenerating m
  // for gm re-runs f1, which writes k again into a buffer of its own that nothing reads: freed
  // after that re-run. m's regenerated copy is gm's to read: dropped at m's own point, not listed.
  memplan::test::WorkloadBuilder b;
  const TensorId x = b.input("x", 1024);
  const OpId f1 = b.op("f1", "linear", Phase::kForward, {x}, {{"m", 1024}, {"k", 1024}}, 10);
  const TensorId m = b.workload().ops[index(f1)].outputs[0];
  const TensorId k = b.workload().ops[index(f1)].outputs[1];
  const TensorId y = b.forward("f2", {m, k}, 1024, 10);
  TensorId g = b.backward("gy", {y}, 1024, 10);
  g = b.backward("gk", {g, k}, 1024, 10);
  b.backward("gm", {g, m}, 1024, 10);
  const std::vector<RegeneratedFree> frees = frees_recomputing(b.build(), {m});
  REQUIRE(frees.size() == 1);
  CHECK(frees[0].tensor == k);
  CHECK(frees[0].rerun == f1);
  CHECK(frees[0].occurrence == 0);
}
