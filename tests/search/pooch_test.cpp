// PoocH's steps on a workload whose all-swap timeline is worked out by hand.
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
