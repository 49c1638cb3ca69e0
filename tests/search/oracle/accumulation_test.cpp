// The search's oracle on a step with gradient accumulation (two micro-batches, each a forward and
// a backward pass, then the update: memplan::test::two_micro_batches): a lowering kept where the
// first backward pass starts and resumed there lowers a plan that changes the later micro-batch's
// maps as a full lowering does (Note [Resuming a lowering]), and every policy's plan is one the
// simulator takes.
#include <catch2/catch.hpp>

#include "core/plan.hpp"
#include "search/oracle/resumed_lowering.hpp"
#include "search/studies/comparison.hpp"
#include "sim/engine.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::search::ResumableLowerer;
using memplan::test::plan_with;
using memplan::test::test_machine;
using memplan::test::two_micro_batches;

namespace {
bool same_stream(const std::vector<Instruction>& a, const std::vector<Instruction>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].op != b[i].op || a[i].buffer != b[i].buffer ||
        a[i].duration_ns != b[i].duration_ns)
      return false;
  }
  return true;
}
}  // namespace

TEST_CASE("a lowering resumed at the first backward pass lowers a later micro-batch's changes",
          "[search][oracle]") {
  const Workload w = two_micro_batches(2048);
  ResumableLowerer lowerer(w);
  Program base_program;
  ResumableLowerer::Checkpoint checkpoint;
  lowerer.lower(plan_with(w, {{"f1_out", Action::kSwap}}), base_program, checkpoint);
  REQUIRE_FALSE(checkpoint.empty());
  CHECK(checkpoint.at() == OpId{2});  // gh1: where the first micro-batch's backward pass starts
  // Every decision about the second micro-batch's maps acts after the checkpoint, and so does
  // the prefetch of the first's: each such plan resumes exactly.
  for (const auto& plan : {plan_with(w, {{"f1_out", Action::kSwap}, {"f2_out", Action::kSwap}}),
                           plan_with(w, {{"f1_out", Action::kSwap},
                                         {"f2_out", Action::kRecompute},
                                         {"h2_out", Action::kSwap}}),
                           plan_with(w, {{"f1_out", Action::kSwap, Encoding::kNone, "gf1"},
                                         {"h2_out", Action::kRecompute}})}) {
    Program resumed;
    const auto r = lowerer.resume(plan, checkpoint, resumed);
    REQUIRE(r.how == ResumableLowerer::Resumable::kExact);
    const Program expected = lower(w, plan);
    REQUIRE(resumed.streams.size() == expected.streams.size());
    for (std::size_t s = 0; s < expected.streams.size(); ++s)
      CHECK(same_stream(resumed.streams[s], expected.streams[s]));
    const Machine m = test_machine(memplan::test::kPlenty);
    Engine engine;
    const Timeline a = engine.run(resumed, m);
    const Timeline b = engine.run(expected, m);
    CHECK(a.iteration_ns == b.iteration_ns);
    CHECK(a.peak_bytes == b.peak_bytes);
  }
  // A change to the first micro-batch's forward pass does not resume.
  CHECK(lowerer.resumable(plan_with(w, {{"f1_out", Action::kRecompute}}), checkpoint) !=
        ResumableLowerer::Resumable::kExact);
}

TEST_CASE("every policy's plan of a step of two micro-batches is one the simulator takes",
          "[search][oracle]") {
  const Workload w = two_micro_batches(2048);
  for (const Bytes memory : {Bytes{4096}, Bytes{1} << 30}) {
    CAPTURE(memory);
    const auto c = memplan::search::compare_policies(w, test_machine(memory, 1e9, 100));
    REQUIRE_FALSE(c.rows.empty());
    for (const auto& row : c.rows) {
      CAPTURE(row.policy);
      validate_plan(row.decision.plan, w, row.policy);
      if (memory == Bytes{1} << 30) CHECK(row.timeline.feasible);
    }
  }
}
