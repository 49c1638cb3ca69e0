// Capuchin's ranking and plan on a workload worked out by hand (Note [Capuchin in a plan]).
#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "search/policies/policy.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// f1 1000, f2 800, f3 500, f4 400 ns; h1 1000, h2 3000, h3 2000, h4 1000 ns. In-core schedule:
// f1 [0,1000] f2 [1000,1800] f3 [1800,2300] f4 [2300,2700] h1 [2700,3700] h2 [3700,6700]
// h3 [6700,8700] h4 [8700,9700]. Free times (last forward use = producer, none reads them in
// forward): a = start h3 - end f1 = 5700, b = start h2 - end f2 = 1900, c = start h4 - end f3 =
// 6400; d is read by h1, the op right after f4, so evicting it saves nothing: no candidate.
// In-core peak (every buffer a multiple of 512): x, a, b, c, d and g1 at h1 = 5632 bytes.
Workload capuchin_fan() {
  return fan({1000, 800, 500, 400}, {1000, 3000, 2000, 1000});
}

std::vector<std::string> ranked(const Workload& w, const std::vector<CapuchinCandidate>& cs) {
  std::vector<std::string> out;
  for (const CapuchinCandidate& c : cs) {
    out.push_back(
        w.tensor(NetworkView(w).feature_maps()[static_cast<std::size_t>(c.map)].tensor).name +
        (c.hides ? ":swap" : ":recompute"));
  }
  return out;
}

PolicyDecision capuchin(const Workload& w, const Machine& m) {
  Evaluator evaluator(w, m);
  const NetworkView view(w);
  return find_policy("capuchin")->decide(evaluator, view);
}

}  // namespace

TEST_CASE("capuchin ranks swaps by free time, then recomputes by memory saved per second",
          "[search][capuchin]") {
  const Workload w = capuchin_fan();
  REQUIRE(incore_peak(w).bytes == 5632);
  const NetworkView view(w);
  // 1 byte/ns each way: a round trip of a 1024-byte map takes 2048 ns. c (6400) and a (5700)
  // hide it, c first although a comes first in the step; b (1900) does not: it is a recompute
  // candidate, at 1024 bytes / 800 ns.
  const auto fast = capuchin_candidates(view, test_machine(4096, 1e9));
  CHECK(ranked(w, fast) ==
        std::vector<std::string>{"f3_out:swap", "f1_out:swap", "f2_out:recompute"});
  CHECK(fast[0].free_ns == 6400);
  CHECK(fast[1].free_ns == 5700);
  CHECK(fast[2].free_ns == 1900);
  CHECK(fast[2].msps == Approx(1024.0 / 800.0));
  // 0.1 byte/ns: a round trip takes 20480 ns and hides nowhere; by bytes per ns of the producer:
  // c 1024/500, b 1024/800, a 1024/1000.
  const auto slow = capuchin_candidates(view, test_machine(4096, 1e8));
  CHECK(ranked(w, slow) ==
        std::vector<std::string>{"f3_out:recompute", "f2_out:recompute", "f1_out:recompute"});
}

TEST_CASE("capuchin swaps the maps with the most free time until the plan fits",
          "[search][capuchin]") {
  // 4096 bytes: 1536 to save, so c and then a are swapped (2048 saved) and the plan fits: with
  // a and c away the worst op is h2 (x, b, g1, g2 and a, prefetched for h3) = 4096 bytes.
  // Freed at their last forward use, a's copy-out [1000,2024] would delay f2 and c's [3324,4348]
  // f4: 9700 ns of compute + 2048 = 11748. Capuchin frees a map once its copy-out is done
  // (Note [Release point]): in the in-core schedule a's copy [1000,2024] ends before f4 starts
  // (2300), c's [2300,3324] (queued behind a's, from the end of f3) before h2 (3700). Both at once
  // hold c at h1: x, b, c, d, g1 = 4608 bytes, over 4096. One at a time, c first (equal stalls,
  // the later map first): c alone again holds it at h1; a alone fits. Then: f1 [0,1000], f2
  // [1000,1800], f3 [1800,2300]; c's copy-out [2300,3324] still holds compute after f3; a's release
  // before f4 finds its copy done (2024). f4 [3324,3724] h1 [3724,4724] h2 [4724,7724] h3
  // [7724,9724] h4 [9724,10724]; the prefetches (a at 4724, c at 7724) land during h2 and h3: 9700
  // + 1024 = 10724. The in-triggers are the default points here (a's copy-in must start by 5676,
  // c's by 7676: the ops before their first backward uses), so they change nothing.
  const Workload w = capuchin_fan();
  const Machine m = test_machine(4096, 1e9);
  const auto d = capuchin(w, m);
  CHECK(actions(d.plan) ==
        std::vector<Action>{Action::kSwap, Action::kKeep, Action::kSwap, Action::kKeep});
  const Evaluation e = Evaluator(w, m).cost(d.plan);
  REQUIRE(e.feasible);
  CHECK(w.op(d.plan.decisions[0].release_before).name == "f4");
  CHECK(d.plan.decisions[2].release_before == kNoOp);
  CHECK(d.plan.decisions[0].prefetch_before == kNoOp);
  CHECK(d.plan.decisions[2].prefetch_before == kNoOp);
  CHECK(e.iteration_ns == 10724);
  CHECK(e.peak_bytes == 4096);
}

TEST_CASE("capuchin recomputes where no swap can hide, highest saving per second first",
          "[search][capuchin]") {
  const Workload w = capuchin_fan();
  // 4608 bytes, slow link: 1024 to save; c (the cheapest to regenerate per byte) is recomputed
  // before h4 from x: 9700 + 500 = 10200 ns; the worst op is h1 (x, a, b, d, g1 = 4608).
  const Machine roomier = test_machine(4608, 1e8);
  const auto one = capuchin(w, roomier);
  CHECK(actions(one.plan) ==
        std::vector<Action>{Action::kKeep, Action::kKeep, Action::kRecompute, Action::kKeep});
  const Evaluation e1 = Evaluator(w, roomier).cost(one.plan);
  REQUIRE(e1.feasible);
  CHECK(e1.iteration_ns == 10200);
  // 4096 bytes: 1536 to save: c, then b (regenerated before h2): 9700 + 500 + 800 = 11000 ns.
  const Machine tight = test_machine(4096, 1e8);
  const auto two = capuchin(w, tight);
  CHECK(actions(two.plan) ==
        std::vector<Action>{Action::kKeep, Action::kRecompute, Action::kRecompute, Action::kKeep});
  const Evaluation e2 = Evaluator(w, tight).cost(two.plan);
  REQUIRE(e2.feasible);
  CHECK(e2.iteration_ns == 11000);
}

TEST_CASE("capuchin's swaps share the link: copy-outs past the forward pass do not hide",
          "[search][capuchin]") {
  const Workload w = capuchin_fan();
  const NetworkView view(w);
  // 0.5 byte/ns: a 1024-byte map takes 2048 ns each way, a round trip 4096 ns. Alone, c (free
  // time 6400) and a (5700) would each hide it. Taken by free time, c's copy-out fills 2048 ns of
  // the 2700 ns forward pass (f1..f4); a's would end at 4096 > 2700, so a is a recompute
  // candidate, ranked with b (1900 < 4096) by bytes per ns of its producer: b 1024/800, then a
  // 1024/1000.
  const auto shared = capuchin_candidates(view, test_machine(4096, 5e8));
  CHECK(ranked(w, shared) ==
        std::vector<std::string>{"f3_out:swap", "f2_out:recompute", "f1_out:recompute"});
}
