// PoocH's steps on a workload whose all-swap timeline is worked out by hand.
#include <array>

#include <catch2/catch.hpp>

#include "search/policy.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// f1 (1000 ns) -> f2 (2000) -> f3 (3000); backward g3 (1000) reads c, g2 (2000) reads b, g1 (1500)
// reads a. Links move 1 byte per ns, no latency.
Workload chain(Bytes a, Bytes b, Bytes c) {
  WorkloadBuilder w;
  const auto x = w.input("x", 100);
  const auto ta = w.forward("f1", {x}, a, 1000);
  const auto tb = w.forward("f2", {ta}, b, 2000);
  const auto tc = w.forward("f3", {tb}, c, 3000);
  const auto gc = w.backward("g3", {tc}, 100, 1000);
  const auto gb = w.backward("g2", {gc, tb}, 100, 2000);
  w.backward("g1", {gb, ta}, 100, 1500);
  return w.build();
}

std::vector<std::string> names(const Workload& w, const NetworkView& view,
                               const std::vector<int>& maps) {
  std::vector<std::string> out;
  for (int m : maps)
    out.push_back(w.tensor(view.feature_maps()[static_cast<std::size_t>(m)].tensor).name);
  return out;
}

}  // namespace

TEST_CASE("PoocH's profile: swap-ins and swap-outs that compute does not hide", "[search][pooch]") {
  // All-swap with a = 5000, b = 100, c = 100 bytes:
  //  f1 [0,1000]; copy-out a [1000,6000]. f2 [1000,3000]; a's last forward use is f2, so compute
  //  waits for its copy-out until 6000 (a's swap-out is exposed). copy-out b [6000,6100] (behind
  //  a). f3 [6000,9000]; b's copy-out ended before f3 did (hidden). copy-out c [9000,9100] and c is
  //  dropped right after f3: compute waits 100 ns (c's swap-out exposed).
  //  Prefetches of b and c are issued before g3 (their first backward uses are g2 and g3): b
  //  [9100,9200], c [9200,9300]; g3 waits for c until 9300 (c's swap-in exposed). a's prefetch
  //  before g2 [10300,15300]; g1 waits until 15300 (a's swap-in exposed). b's swap-in is hidden.
  // So L_I = {a (3000 ns), c (200 ns)} longest first, and L_O \ L_I is empty.
  const Workload w = chain(5000, 100, 100);
  Evaluator evaluator(w, test_machine(Bytes{1} << 30));
  const NetworkView view(w);
  const PoochProfile p = pooch_profile(evaluator, view);
  CHECK(names(w, view, p.swap_in_exposed) == std::vector<std::string>{"f1_out", "f3_out"});
  CHECK(p.swap_out_only_exposed.empty());
}

TEST_CASE("with room for everything PoocH keeps the exposed maps and leaves hidden swaps alone",
          "[search][pooch]") {
  // With room for everything, every exposed swap becomes a keep and nothing is left to recompute
  // (swaps that compute hides stay swapped: PoocH only revisits L_I and L_O).
  const Workload w = chain(5000, 100, 100);
  Evaluator roomy(w, test_machine(Bytes{1} << 30));
  const auto d = find_policy("pooch")->decide(roomy, NetworkView(w));
  CHECK(d.plan.decisions[0].action == Action::kKeep);   // f1_out
  CHECK(d.plan.decisions[2].action == Action::kKeep);   // f3_out
  CHECK(d.plan.decisions[1].action == Action::kSwap);   // f2_out: its swap is hidden
  CHECK(roomy.evaluate(d.plan).iteration_ns == 10500);  // the compute time: nothing exposed
}

namespace {

// The same chain with chosen durations: forward f1, f2, f3 and backward g3, g2, g1.
Workload timed_chain(Bytes a, Bytes b, Bytes c, std::array<Nanoseconds, 6> ns) {
  WorkloadBuilder w;
  const auto x = w.input("x", 100);
  const auto ta = w.forward("f1", {x}, a, ns[0]);
  const auto tb = w.forward("f2", {ta}, b, ns[1]);
  const auto tc = w.forward("f3", {tb}, c, ns[2]);
  const auto gc = w.backward("g3", {tc}, 100, ns[3]);
  const auto gb = w.backward("g2", {gc, tb}, 100, ns[4]);
  w.backward("g1", {gb, ta}, 100, ns[5]);
  return w.build();
}

}  // namespace

TEST_CASE("PoocH's profile: a swap-out that compute does not hide, its swap-in hidden (L_O)",
          "[search][pooch]") {
  // f1 1000, f2 500, f3 3000; g3 1000, g2 4000, g1 1500 ns; a = 1000, b = c = 100 bytes.
  // All-swap: copy-out a [1000,2000] outlasts f2 [1000,1500]: compute waits 500 ns (exposed).
  // b [2000,2100] is hidden by f3 [2000,5000]; c [5000,5100] is dropped right after f3 (exposed
  // 100 ns). Prefetches of b and c before g3: [5100,5200], [5200,5300]; g3 waits for c (exposed).
  // a's prefetch before g2 [6300,7300] ends within g2 [6300,10300]: hidden.
  // So L_I = {c} and L_O \ L_I = {a}; with room for everything PoocH keeps both.
  const Workload w = timed_chain(1000, 100, 100, {1000, 500, 3000, 1000, 4000, 1500});
  Evaluator evaluator(w, test_machine(Bytes{1} << 30));
  const NetworkView view(w);
  const PoochProfile p = pooch_profile(evaluator, view);
  CHECK(names(w, view, p.swap_in_exposed) == std::vector<std::string>{"f3_out"});
  CHECK(names(w, view, p.swap_out_only_exposed) == std::vector<std::string>{"f1_out"});
  const auto d = find_policy("pooch")->decide(evaluator, view);
  CHECK(d.plan.decisions[0].action == Action::kKeep);       // L_O \ L_I scanned: fits, kept
  CHECK(d.plan.decisions[1].action == Action::kSwap);       // hidden
  CHECK(d.plan.decisions[2].action == Action::kKeep);       // L_I enumerated: keeping it is fastest
  CHECK(evaluator.evaluate(d.plan).iteration_ns == 11000);  // compute only
}

TEST_CASE("PoocH's r(X) loop turns swaps into recomputes where no keep/swap classification fits",
          "[search][pooch]") {
  // a = 5000, b = 100, c = 2000 bytes; default durations (f 1000/2000/3000, g 1000/2000/1500);
  // a 7680-byte device. The arena rounds every buffer up to 512 bytes: x, b and the gradients
  // take 512, a 5120, c 2048. No keep/swap classification fits: keeping a needs x + a + b + c =
  // 8192 bytes at f3; swapping it, its prefetch during g2 needs 5120 contiguous bytes above x,
  // b and g3's gradient, with the 2048-byte hole c leaves below them (first fit): 8704. So every
  // leaf of the enumeration fails and the r(X) loop starts from all-swap (unbounded overhead).
  // Recomputing a fits (x + a + two gradients = 6656 at g1), and so does recomputing c.
  // With a recomputed and b, c swapped: c's copy-out stalls 2000 ns and its prefetch 2100 ns:
  // 15600 ns against 11500 with c kept on an unlimited device, a swap overhead of 4100 ns;
  // recomputing c re-runs f3 (3000 ns, after b's prefetch): 14600 - 11500 = 3100 ns, r(c) = 0.76
  // < 1 -> recompute. b's swap is hidden (its overhead is 0, r infinite): it stays swapped.
  // Final: f1 f2 f3 | g3 after f3* (3000) | g2 | g1 after f1* (1000) = 14600 ns.
  const Workload w = chain(5000, 100, 2000);
  Evaluator evaluator(w, test_machine(7680));
  const NetworkView view(w);
  const auto d = find_policy("pooch")->decide(evaluator, view);
  CHECK(d.plan.decisions[0].action == Action::kRecompute);  // a
  CHECK(d.plan.decisions[1].action == Action::kSwap);       // b
  CHECK(d.plan.decisions[2].action == Action::kRecompute);  // c
  const Evaluation e = evaluator.evaluate(d.plan);
  REQUIRE(e.feasible);
  CHECK(e.iteration_ns == 14600);
  // The leaves that keep a or c do not fit; all-swap does not either.
  for (const auto& [keep_a, keep_c] : {std::pair{true, false}, {false, true}, {true, true}}) {
    Plan leaf = d.plan;
    leaf.decisions[0].action = keep_a ? Action::kKeep : Action::kSwap;
    leaf.decisions[2].action = keep_c ? Action::kKeep : Action::kSwap;
    CHECK_FALSE(evaluator.evaluate(leaf).feasible);
  }
  Plan all_swap = d.plan;
  for (Decision& x : all_swap.decisions) x.action = Action::kSwap;
  CHECK_FALSE(evaluator.evaluate(all_swap).feasible);
}
