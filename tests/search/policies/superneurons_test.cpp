// SuperNeurons' segment modes, and the plan's per-use recomputation they rely on.
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "io/plan_io.hpp"
#include "search/policies/policy.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// x -> conv1 -> r1 -> r2 -> r3 -> loss (1000 bytes each). Feature maps: r1_out, r2_out, r3_out
// (each ReLU's backward reads its output; the loss reads r3_out). conv1_out is read in forward
// only, so it is regenerated on the way. Backward: loss_bwd, r3_bwd, r2_bwd, r1_bwd, conv1_bwd.
Workload relu_chain() {
  return layer_chain({conv("conv1"), relu("r1"), relu("r2"), relu("r3"), loss("loss", 1000)});
}

Plan recompute_relus(const Workload& w, bool per_use) {
  Plan plan = in_core_plan(w);
  for (Decision& d : plan.decisions) {
    d.action = Action::kRecompute;
    d.per_use = per_use;
  }
  return plan;
}

// The compute stream's runs and recomputes, in order ("conv1 r1* ..." with * for a recompute).
std::string ops_run(const Workload& w, const Program& p) {
  std::string out;
  for (const Instruction& in : p.stream(StreamId::kCompute)) {
    if (in.kind == InstrKind::kRun) out += w.op(in.op).name + " ";
    if (in.kind == InstrKind::kRecompute) out += w.op(in.op).name + "* ";
  }
  return out;
}

std::string modes(const Workload& w, const Plan& plan) {
  std::string out;
  for (const Decision& d : plan.decisions) {
    out += w.tensor(d.tensor).name + "=" + std::string(to_string(d.action)) +
           (d.per_use ? "/per-use " : " ");
  }
  return out;
}

}  // namespace

TEST_CASE("per-use recomputation regenerates from the checkpoint for every backward use",
          "[search][superneurons][lowering]") {
  const Workload w = relu_chain();
  REQUIRE(w.tensor(in_core_plan(w).decisions[0].tensor).name == "r1_out");
  // Speed-centric: the segment is regenerated once, before loss_bwd, and kept.
  const Program once = lower(w, recompute_relus(w, false));
  CHECK(ops_run(w, once) ==
        "conv1 r1 r2 r3 loss conv1* r1* r2* r3* loss_bwd r3_bwd r2_bwd r1_bwd conv1_bwd ");
  // Memory-centric: every backward use regenerates from x (the checkpoint) and forgets.
  const Program per_use = lower(w, recompute_relus(w, true));
  CHECK(ops_run(w, per_use) ==
        "conv1 r1 r2 r3 loss conv1* r1* r2* r3* loss_bwd conv1* r1* r2* r3* r3_bwd conv1* r1* r2* "
        "r2_bwd conv1* r1* r1_bwd conv1_bwd ");
  // Forgetting lowers the peak: after r3_bwd the speed-centric program still holds r1_out and
  // r2_out (2000 bytes) where the per-use one holds nothing regenerated.
  Engine engine;
  const Machine m = test_machine(Bytes{1} << 30);
  const Bytes peak_once = engine.run(once, m).peak_bytes;
  const Bytes peak_per_use = engine.run(per_use, m).peak_bytes;
  CHECK(peak_per_use < peak_once);
}

TEST_CASE("per-use recomputation regenerates once per backward node, not once per op",
          "[search][superneurons][lowering]") {
  // A recorded step's autograd node runs several aten ops, all differentiating its forward op,
  // and holds what it unpacked until it returns (sim::ends_backward_node). Here r3_bwd and r2_bwd
  // are made one node (both differentiate r2): r3_bwd's regeneration of r3_out makes r2_out on
  // the way, which r2_bwd then reads in the same node, so nothing is regenerated for it; the node
  // forgets both after r2_bwd, and r1_bwd regenerates r1_out from x again.
  Workload w = relu_chain();
  auto op_named = [&](const std::string& name) -> Op& {
    return *std::find_if(w.ops.begin(), w.ops.end(), [&](const Op& o) { return o.name == name; });
  };
  op_named("r3_bwd").differentiates = op_named("r2_bwd").differentiates;
  validate(w, "test");
  CHECK(!ends_backward_node(w, op_named("r3_bwd").id));
  CHECK(ends_backward_node(w, op_named("r2_bwd").id));
  CHECK(ends_backward_node(w, op_named("loss_bwd").id));
  CHECK(!ends_backward_node(w, op_named("r3").id));
  CHECK(ops_run(w, lower(w, recompute_relus(w, true))) ==
        "conv1 r1 r2 r3 loss conv1* r1* r2* r3* loss_bwd conv1* r1* r2* r3* r3_bwd r2_bwd conv1* "
        "r1* r1_bwd conv1_bwd ");
}

TEST_CASE("per_use round-trips through plan files and is refused on anything but recompute",
          "[search][superneurons][plan_io]") {
  const Workload w = relu_chain();
  Plan plan = recompute_relus(w, false);
  plan.decisions[1].per_use = true;
  const std::string text = write_plan(plan, w);
  CHECK(text.find("\"per_use\":true") != std::string::npos);
  CHECK(parse_plan(text, "plan.json", w) == plan);
  plan.decisions[1].action = Action::kKeep;
  std::string bad = write_plan(plan, w);
  REQUIRE_THROWS_AS(parse_plan(bad, "plan.json", w), InputError);
  try {
    parse_plan(bad, "plan.json", w);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("per_use is for recomputed maps only") != std::string::npos);
  }
}

TEST_CASE("superneurons picks speed- or memory-centric per segment", "[search][superneurons]") {
  // conv1 a1 | conv2 b1 .. bk | fc loss, 1000 bytes per map (fc 100). The largest single backward
  // layer: conv2_bwd (or any ReLU's) reads a 1000-byte gradient and a 1000-byte map and writes a
  // 1000-byte gradient: 3000 bytes. Segment {a1_out} is 1000 bytes: speed-centric. Segment
  // {b1_out..bk_out} is k * 1000 bytes: speed-centric up to k = 3, memory-centric from k = 4.
  auto network = [](int k) {
    std::vector<LayerSpec> layers{conv("conv1"), relu("a1"), conv("conv2")};
    for (int i = 1; i <= k; ++i) layers.push_back(relu("b" + std::to_string(i)));
    layers.push_back(linear("fc"));
    layers.push_back(loss("loss"));
    return layer_chain(layers);
  };
  auto decide = [](const Workload& w) {
    Evaluator evaluator(w, test_machine(Bytes{1} << 40));
    PolicyDecision d = find_policy("superneurons")->decide(evaluator, NetworkView(w));
    validate_plan(d.plan, w, "superneurons");
    return d;
  };
  const Workload three = network(3);
  const auto d3 = decide(three);
  CHECK(modes(three, d3.plan) ==
        "a1_out=recompute b1_out=recompute b2_out=recompute b3_out=recompute fc_out=keep ");
  CHECK(d3.note.find("2 segments speed-centric, 0 memory-centric") != std::string::npos);
  const Workload four = network(4);
  const auto d4 = decide(four);
  CHECK(modes(four, d4.plan) ==
        "a1_out=recompute b1_out=recompute/per-use b2_out=recompute/per-use "
        "b3_out=recompute/per-use b4_out=recompute/per-use fc_out=keep ");
  CHECK(d4.note.find("1 segments speed-centric, 1 memory-centric") != std::string::npos);
  // Run speed-centric instead, the same plan regenerates the segment once: fewer recomputes.
  Plan speed = d4.plan;
  for (Decision& d : speed.decisions) d.per_use = false;
  auto recomputes = [&](const Plan& plan) {
    std::size_t n = 0;
    const Program program = lower(four, plan);
    for (const Instruction& in : program.stream(StreamId::kCompute))
      n += in.kind == InstrKind::kRecompute ? 1 : 0;
    return n;
  };
  CHECK(recomputes(d4.plan) > recomputes(speed));
}
