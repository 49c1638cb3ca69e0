#include <algorithm>
#include <atomic>
#include <random>

#include <catch2/catch.hpp>

#include "core/feature_maps.hpp"
#include "core/liveness.hpp"
#include "core/machine.hpp"
#include "io/trace_io.hpp"
#include "search/engine/exact.hpp"
#include "search/engine/local_search.hpp"
#include "search/engine/neighbourhood.hpp"
#include "search/engine/plan_search.hpp"
#include "search/engine/seeding.hpp"
#include "search/policies/gist.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/comparison.hpp"
#include "tests/search/engine/exact_instances.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/policy_counts.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"
#include "zoo/zoo.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

Workload net() {
  return layer_chain({conv("conv1", 4000, 3000), relu("relu1", 4000), pool("pool1", 2000),
                      conv("conv2", 2000, 3000), relu("relu2", 2000), conv("conv3", 2000, 2000),
                      relu("relu3", 2000), linear("fc", 500), loss("loss")},
                     Bytes{1} << 40, 2000);
}

SearchOptions quick(int threads, bool deterministic = false) {
  SearchOptions o;
  o.threads = threads;
  o.deterministic = deterministic;
  o.time_limit_s = 60;  // the tiny workloads converge long before
  return o;
}

// The neighbourhood's change of feature map `t` to `action` at its default points.
memplan::search::engine::Change action_change(const NetworkView& view, TensorId t, Action action) {
  memplan::search::engine::Change c;
  c.variable = c.map = view.map_index(t);
  REQUIRE(c.map >= 0);
  c.action = action;
  return c;
}

}  // namespace

TEST_CASE("the ranking: fitting beats not fitting, then the step, the step alone, then memory",
          "[search][plan_search]") {
  // {feasible, step_ns (back to back), iteration_ns (alone), peak, reserved, stall, oom op,
  // missing}
  Evaluation fits_slow{true, 200, 200, 50, 50, 0, kNoOp, 0};
  Evaluation fits_fast{true, 100, 100, 90, 90, 0, kNoOp, 0};
  Evaluation fits_fast_small{true, 100, 100, 60, 60, 0, kNoOp, 0};
  Evaluation no_fit{false, 0, 10, 10, 10, 0, OpId{3}, 512};
  Evaluation no_fit_closer{false, 0, 10, 10, 10, 0, OpId{3}, 100};
  CHECK(better(fits_slow, no_fit));
  CHECK(better(fits_fast, fits_slow));
  CHECK(better(fits_fast_small, fits_fast));
  CHECK(better(no_fit_closer, no_fit));
  CHECK_FALSE(better(fits_fast, fits_fast));
  // A training loop sees the step back to back: a plan slower alone whose period is shorter (the
  // host-bound step hides its copies behind the next step's dispatch) is the better one ...
  Evaluation short_period{true, 90, 150, 90, 90, 0, kNoOp, 0};
  CHECK(better(short_period, fits_fast));
  // ... and between equal periods, the one quicker alone (with the memory of fits_fast_small).
  Evaluation same_period_slower_alone{true, 100, 120, 60, 60, 0, kNoOp, 0};
  CHECK(better(fits_fast, same_period_slower_alone));
}

TEST_CASE("the search is never worse than the best policy", "[search][plan_search]") {
  const Workload w = net();
  const Bytes incore =
      simulate(w, in_core_plan(w), test_machine(Bytes{1} << 40)).timeline.peak_reserved_bytes;
  for (double fraction : {1.0, 0.9, 0.8, 0.7}) {
    CAPTURE(fraction);
    const Machine m =
        test_machine(static_cast<Bytes>(static_cast<double>(incore) * fraction), 2e8, 1000);
    const SearchResult r = search_plan(w, m, quick(2));
    const Comparison c = compare_policies(w, m);
    for (const ComparisonRow& row : c.rows) {
      CAPTURE(row.policy);
      Evaluation policy = summarize(row.timeline);
      policy.step_ns = row.step_ns();  // as compare ranks it
      CHECK_FALSE(better(policy, r.evaluation));
    }
    CHECK((r.converged || r.within_gap));
    // The plan it reports is the plan it found.
    const Timeline found = simulate(w, r.plan, m).timeline;
    CHECK(found.iteration_ns == r.evaluation.iteration_ns);
    CHECK(found.period_ns == r.evaluation.step_ns);
  }
}

TEST_CASE("the search stops once its plan is within the gap of the lower bound",
          "[search][plan_search]") {
  const Workload w = net();
  const Bytes incore =
      simulate(w, in_core_plan(w), test_machine(Bytes{1} << 40)).timeline.peak_reserved_bytes;
  // In core the plan that keeps every map is the ideal step, at the bound: within any gap, 0
  // included, after the seeding and before a round.
  SearchOptions at_bound = quick(2, true);
  at_bound.gap = 0;
  const SearchResult fits = search_plan(w, test_machine(incore, 2e8, 1000), at_bound);
  REQUIRE(fits.lower_bound);
  CHECK(fits.evaluation.iteration_ns == fits.lower_bound->bound_ns);  // the ideal step
  CHECK(fits.within_gap);
  CHECK(fits.rounds == 0);
  CHECK(stop_reason(fits, 0) == "within 0% of the lower bound");
  // At 95% of it the best seed is 26600 ns against the bound's 26500 (0.38%): within the default
  // gap, so no round runs; asked for 0, the search runs its rounds to convergence.
  const Machine near = test_machine(incore * 95 / 100, 2e8, 1000);
  const SearchResult stopped = search_plan(w, near, quick(2, true));
  REQUIRE(stopped.lower_bound);
  CHECK(stopped.lower_bound->bound_ns == 26500);
  CHECK(stopped.evaluation.iteration_ns == 26600);
  CHECK(stopped.within_gap);
  CHECK(stopped.rounds == 0);
  const SearchResult on = search_plan(w, near, at_bound);
  CHECK_FALSE(on.within_gap);
  CHECK(on.converged);
  CHECK(on.rounds > 0);
  CHECK(on.evaluation.iteration_ns <= 26600);
  // At 80% the plan the search converges to is further than the default gap from the bound ...
  const Machine tight = test_machine(incore * 8 / 10, 2e8, 1000);
  const SearchResult full = search_plan(w, tight, quick(2, true));
  REQUIRE(full.evaluation.feasible);
  REQUIRE(full.lower_bound);
  CHECK_FALSE(full.within_gap);
  CHECK(full.converged);
  CHECK(full.rounds > 0);
  CHECK(*bound_gap(*full.lower_bound, {true, full.evaluation.iteration_ns, 0}) > 0.005);
  // ... and with a gap wider than any plan's it stops at the first plan that fits: no seed does
  // here, the first round finds one.
  SearchOptions wide = quick(2, true);
  wide.gap = 100;
  const SearchResult early = search_plan(w, tight, wide);
  CHECK_FALSE(early.best_policy_evaluation.feasible);
  CHECK(early.evaluation.feasible);
  CHECK(early.within_gap);
  CHECK(early.rounds == 1);
  CHECK(stop_reason(early, wide.gap) == "within 10000% of the lower bound");
  // A step with a host side stops within the gap of its bound back to back, the step it is ranked
  // by (Note [A bound on the step back to back] in search/bound/lower_bound.cpp).
  Workload hosted = w;
  hosted.launch_ns = 100;
  const SearchResult host = search_plan(hosted, tight, wide);
  REQUIRE(host.lower_bound);
  REQUIRE(host.lower_bound->period_bound_ns);
  CHECK(host.within_gap);
  CHECK(static_cast<double>(host.evaluation.step_ns) <=
        static_cast<double>(*host.lower_bound->period_bound_ns) * (1 + wide.gap));
}

TEST_CASE("the same seed and threads give the same plan, --deterministic any thread count",
          "[search][plan_search]") {
  const Workload w = net();
  const Machine m = test_machine(20000, 2e8, 1000);
  CHECK(search_plan(w, m, quick(2)).plan == search_plan(w, m, quick(2)).plan);
  CHECK(search_plan(w, m, quick(1, true)).plan == search_plan(w, m, quick(2, true)).plan);
}

TEST_CASE("compound moves: summed improvements and repaired plans beat one move a round",
          "[search][plan_search]") {
  // ResNet-50 batch 16 on a V100 over PCIe 3 with a quarter of its feature-map bytes on the
  // device: no policy fits, and one change a round leaves the search far from where the same
  // rounds get with the round's improving moves summed and the faster plans that ran out of memory
  // repaired (Notes [Combined improvements] and [Repair chains] in local_search.cpp). Measured:
  // 87.4 ms one move a round, 84.0 ms with compound moves (ideal 48.9 ms; 87.8 and 82.8 ms before
  // batches were drawn without replacement, with the moves the stalls ask for).
  memplan::zoo::ZooRequest request;
  request.model = "resnet50";
  request.device = "v100-16gb";
  request.options.batch = 16;
  const Workload w = memplan::zoo::make_workload(request);
  const Machine m = keeping_maps(w, 1, 4);
  SearchOptions o = quick(2, true);
  o.time_limit_s = 600;  // the rounds end it
  o.max_rounds = 30;
  o.compound_moves = false;
  const SearchResult one = search_plan(w, m, o);
  o.compound_moves = true;
  const SearchResult compound = search_plan(w, m, o);
  REQUIRE(one.evaluation.feasible);
  REQUIRE(compound.evaluation.feasible);
  CHECK(static_cast<double>(compound.evaluation.step_ns) <
        0.97 * static_cast<double>(one.evaluation.step_ns));
  // Still deterministic: any thread count, the same plan.
  o.threads = 1;
  CHECK(search_plan(w, m, o).plan == compound.plan);
}

TEST_CASE("a repair chain adds the relief that costs least time per byte of excess removed",
          "[search][plan_search]") {
  using memplan::search::engine::cheapest_relief;
  // A plan 1000 bytes over the device that takes 100 ns without a limit, and its reliefs.
  auto over = [](Bytes excess, Nanoseconds unlimited) {
    Evaluation e;
    e.excess_bytes = excess;
    e.unlimited_ns = unlimited;
    return e;
  };
  const Evaluation at = over(1000, 100);
  std::vector<Evaluation> scores{
      over(600, 140),   // 40 ns for 400 bytes: 0.1 ns a byte
      over(200, 200),   // 100 ns for 800 bytes: 0.125 (the least excess, the old choice)
      over(900, 105),   // 5 ns for 100 bytes: 0.05, the cheapest
      over(1000, 90)};  // removes nothing
  CHECK(cheapest_relief(at, scores) == 2);
  // A relief that runs no slower costs nothing: the most excess it removes wins among those.
  scores.push_back(over(950, 100));
  scores.push_back(over(700, 95));
  CHECK(cheapest_relief(at, scores) == 5);
  // One that fits beats every one that does not; among those that fit, the faster.
  Evaluation fits;
  fits.feasible = true;
  fits.step_ns = fits.iteration_ns = 300;
  scores.push_back(fits);
  fits.step_ns = fits.iteration_ns = 250;
  scores.push_back(fits);
  CHECK(cheapest_relief(at, scores) == 7);
  // None removes any excess (or was refused: no excess measured): none.
  CHECK(cheapest_relief(at, {over(1000, 90), over(1200, 100), Evaluation{}}) == 3);
}

TEST_CASE("a repair chain moves the arena's blocks where no change frees bytes where it ran out",
          "[search][plan_search]") {
  // AlexNet b64 on a V100 with 90% of its feature-map bytes, maps only (Note [Repair chains]).
  // vDNN's plan, the best policy's, runs features.0_bwd and features.3_bwd with their
  // memory-optimal algorithms (30.83 ms, no stall). The chain from features.3_bwd's fastest
  // algorithm recomputes the two maps that can be away there and stays 39 MB short: its 284.77
  // MiB workspace meets 335 MiB free in blocks of at most 235.89 MiB. Maps kept instead of
  // swapped, dead by that op, move the blocks so that it fits. With seed 1 the search used to
  // settle on vDNN's plan; measured now 27.78 ms (ideal 26.33 ms).
  memplan::zoo::ZooRequest request;
  request.model = "alexnet";
  request.device = "v100-16gb";
  request.options.batch = 64;
  const Workload w = memplan::zoo::make_workload(request);
  const Machine m = keeping_maps(w, 9, 10);
  SearchOptions o = quick(2, true);
  o.host_placement = false;
  const SearchResult r = search_plan(w, m, o);
  REQUIRE(r.best_policy == "vdnn-dyn");
  REQUIRE(r.evaluation.feasible);
  CHECK(static_cast<double>(r.evaluation.step_ns) <
        0.95 * static_cast<double>(r.best_policy_evaluation.step_ns));
}

TEST_CASE("the moves the stalls ask for: a release point later, a prefetch earlier, by the stall",
          "[search][plan_search]") {
  // Forward a (100 ns), b (200), c (300), d (400); backward gd (500), gc (600), gb (700), ga
  // (800), each reading its forward map. Map a is swapped: its last forward use is b (op 1), its
  // first backward use ga (op 7), its default prefetch point gb (op 6).
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1000);
  const TensorId ta = b.forward("a", {x}, 1000, 100);
  const TensorId tb = b.forward("b", {ta}, 1000, 200);
  const TensorId tc = b.forward("c", {tb}, 1000, 300);
  const TensorId td = b.forward("d", {tc}, 1000, 400);
  const TensorId gd = b.backward("gd", {td}, 1000, 500);
  const TensorId gc = b.backward("gc", {gd, tc}, 1000, 600);
  const TensorId gb = b.backward("gb", {gc, tb}, 1000, 700);
  b.backward("ga", {gb, ta}, 1000, 800);
  const Workload w = b.build();
  const NetworkView view(w);
  const memplan::search::engine::Neighbourhood hood(view, {}, false, true);
  const int a = view.map_index(ta);
  REQUIRE(a >= 0);
  Plan plan = keep_all(view, "");
  plan.decisions[static_cast<std::size_t>(a)].action = Action::kSwap;
  Timeline timeline;
  // Compute waited 450 ns at op 2 (c) for a's copy-out, and 450 ns at op 7 (ga) for its copy-in;
  // a kept map's stall (b's) asks for nothing.
  timeline.stalls.push_back({StallCause::kSwapOut, ta, op_id(2), 1000, 1450});
  timeline.stalls.push_back({StallCause::kSwapIn, ta, op_id(7), 5000, 5450});
  timeline.stalls.push_back({StallCause::kSwapIn, tb, op_id(6), 4000, 9000});
  const std::vector<memplan::search::engine::Move> moves = hood.stall_moves(plan, timeline, 4);
  // The copy-out first (stalled as long as the copy-in, and listed first): its release 225 ns
  // later is before d (op 3: c takes 300 ns), 450 ns later before gd (op 4: c and d take 700).
  // The copy-in: the prefetch 225 or 450 ns earlier is before gc (op 5, 600 ns ahead of gb) both
  // times, one move.
  REQUIRE(moves.size() == 3);
  for (const auto& m : moves) {
    REQUIRE(m.size() == 1);
    CHECK(m.front().map == a);
    CHECK(m.front().action == Action::kSwap);
  }
  CHECK(moves[0].front().release_before == op_id(3));
  CHECK(moves[0].front().prefetch_before == kNoOp);
  CHECK(moves[1].front().release_before == op_id(4));
  CHECK(moves[2].front().prefetch_before == op_id(5));
  CHECK(moves[2].front().release_before == kNoOp);
  // Each move is a valid plan.
  for (const auto& m : moves) {
    const Plan next = memplan::search::engine::with_move(plan, m, hood);
    CHECK(decision_problem(next.decisions[static_cast<std::size_t>(a)],
                           view.feature_maps()[static_cast<std::size_t>(a)], w)
              .empty());
  }
  // Only the longest: one map, its copy-out stall the first (stable among equals).
  CHECK(hood.stall_moves(plan, timeline, 1).size() == 2);
}

TEST_CASE("sibling moves: the maps one op writes take a single change's action together",
          "[search][plan_search]") {
  using memplan::search::engine::Change;
  using memplan::search::engine::Move;
  // A batch norm writes its output and its saved mean and inverse deviation (op 1); an op before
  // it and one after write one map each; the backward reads every map.
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1000);
  const TensorId ta = b.forward("a", {x}, 1000, 100);
  const OpId bn = b.op("bn", "batch_norm", Phase::kForward, {ta},
                       {{"bn_out", 1000}, {"bn_mean", 512}, {"bn_invstd", 512}}, 100);
  const std::vector<TensorId> written = b.workload().op(bn).outputs;
  REQUIRE(written.size() == 3);
  const TensorId out = written[0];
  const TensorId mean = written[1];
  const TensorId invstd = written[2];
  const TensorId tc = b.forward("c", {out}, 1000, 100);
  const TensorId gc = b.backward("gc", {tc}, 1000, 100);
  const TensorId gbn = b.backward("gbn", {gc, out, mean, invstd, ta}, 1000, 100);
  b.backward("ga", {gbn, x}, 1000, 100);
  const Workload w = b.build();
  REQUIRE(w.tensor(mean).producer == bn);
  REQUIRE(w.tensor(invstd).producer == bn);
  const NetworkView view(w);
  const memplan::search::engine::Neighbourhood hood(view, {}, false, true);
  const auto map = [&](TensorId t) {
    const int m = view.map_index(t);
    REQUIRE(m >= 0);
    return m;
  };
  const auto change = [&](TensorId t, Action action) { return action_change(view, t, action); };
  Plan plan = keep_all(view, "");
  plan.decisions[static_cast<std::size_t>(map(invstd))].action = Action::kRecompute;
  // The output recomputed: the mean comes too (the inverse deviation is already); the mean
  // recomputed as well is the same producer and action, so no second move; a's and c's maps have
  // no siblings; a swap of the inverse deviation brings the two others to swap; a pair, an
  // algorithm change and an encoding come back with nothing.
  Change encoded = change(mean, Action::kEncode);
  encoded.encoding = Encoding::kFp16;
  const std::vector<Move> moves = {{change(out, Action::kRecompute)},
                                   {change(mean, Action::kRecompute)},
                                   {change(ta, Action::kRecompute)},
                                   {change(tc, Action::kSwap)},
                                   {change(invstd, Action::kSwap)},
                                   {change(out, Action::kSwap), change(ta, Action::kSwap)},
                                   {encoded}};
  const std::vector<Move> grown = hood.sibling_moves(plan, moves);
  REQUIRE(grown.size() == 2);
  CHECK(grown[0] == Move{change(out, Action::kRecompute), change(mean, Action::kRecompute)});
  CHECK(grown[1] == Move{change(invstd, Action::kSwap), change(out, Action::kSwap),
                         change(mean, Action::kSwap)});
  // Each is a valid plan with the three maps alike.
  for (const Move& m : grown) {
    const Plan next = memplan::search::engine::with_move(plan, m, hood);
    for (TensorId t : {out, mean, invstd}) {
      const auto k = static_cast<std::size_t>(map(t));
      CHECK(next.decisions[k].action == m.front().action);
      CHECK(decision_problem(next.decisions[k], view.feature_maps()[k], w).empty());
    }
  }
}

TEST_CASE("timed swaps: a swap at its default points comes again with its copies hidden",
          "[search][plan_search]") {
  using memplan::search::engine::Change;
  using memplan::search::engine::Move;
  // a (1000 bytes) is made by op 0 and read by op 1 in forward and by op 11, the last backward
  // op; every op takes 300 ns and the link moves 1000 bytes in 1000 ns (no latency). Its
  // copy-out (1000 ns) is covered by ops 2 to 5 (1200 ns): released before op 6; its copy-in by
  // ops 7 to 10: prefetched before op 7 (Note [Timed swaps] in neighbourhood.cpp).
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1000);
  const TensorId a = b.forward("a", {x}, 1000, 300);
  TensorId t = b.forward("b", {a}, 1000, 300);
  for (const char* name : {"c", "d", "e", "f", "g"}) t = b.forward(name, {t}, 1000, 300);
  const TensorId t6 = t;  // op 6's output, read by op 7
  TensorId g = b.backward("g1", {t6}, 1000, 300);
  for (const char* name : {"g2", "g3", "g4"}) g = b.backward(name, {g}, 1000, 300);
  b.backward("ga", {g, a}, 1000, 300);
  const Workload w = b.build();
  REQUIRE(w.ops.size() == 12);
  const NetworkView view(w);
  const memplan::search::engine::Neighbourhood hood(view, {}, false, true);
  const Machine m = test_machine(Bytes{1} << 20, 1e9, 0);
  const auto change = [&](TensorId tensor, Action action) {
    return action_change(view, tensor, action);
  };
  const Plan plan = keep_all(view, "");
  // a's swap comes again timed; t6's window (op 6, op 7] holds no op to hide a copy behind; a
  // swap with a point named, a recomputation and a pair come back with nothing.
  Change named = change(a, Action::kSwap);
  named.prefetch_before = OpId{9};
  const std::vector<Move> moves = {{change(a, Action::kSwap)},
                                   {change(t6, Action::kSwap)},
                                   {named},
                                   {change(a, Action::kRecompute)},
                                   {change(a, Action::kSwap), change(t6, Action::kSwap)}};
  const std::vector<Move> timed = hood.timed_swaps(plan, moves, m);
  REQUIRE(timed.size() == 1);
  Change expected = change(a, Action::kSwap);
  expected.prefetch_before = OpId{7};
  expected.release_before = OpId{6};
  CHECK(timed[0] == Move{expected});
  // A map the plan swaps already gets none.
  const Plan swapped = memplan::search::engine::with_move(plan, moves[0], hood);
  CHECK(hood.timed_swaps(swapped, {moves[0]}, m).empty());
  // Timed, the swap costs nothing: the step is the in-core one (12 ops of 300 ns); at its default
  // points the compute stream waits for both copies.
  const Plan hidden = memplan::search::engine::with_move(plan, timed[0], hood);
  CHECK(decision_problem(hidden.decisions[static_cast<std::size_t>(view.map_index(a))],
                         view.feature_maps()[static_cast<std::size_t>(view.map_index(a))], w)
            .empty());
  CHECK(simulate(w, hidden, m).timeline.iteration_ns == 3600);
  CHECK(simulate(w, swapped, m).timeline.iteration_ns > 3600);
}

TEST_CASE("a round's singles are distinct, the blamed variable's first in chance",
          "[search][plan_search]") {
  using memplan::search::engine::Change;
  // 40 changes of 10 variables (4 each); variable 3 is blamed a billion times the others.
  std::vector<Change> changes;
  for (int v = 0; v < 10; ++v) {
    for (int k = 0; k < 4; ++k) {
      Change c;
      c.variable = c.map = v;
      c.prefetch_before = op_id(k);
      changes.push_back(c);
    }
  }
  std::vector<double> blame(10, 1.0);
  blame[3] = 1e9;
  for (std::uint64_t seed : {1, 2, 3}) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const auto moves = memplan::search::engine::draw(changes, blame, 12, false, rng);
    REQUIRE(moves.size() == 12);
    // No change twice (with replacement, variable 3's four changes filled nearly every place).
    for (std::size_t i = 0; i < moves.size(); ++i) {
      REQUIRE(moves[i].size() == 1);
      for (std::size_t j = 0; j < i; ++j) CHECK_FALSE(moves[i].front() == moves[j].front());
    }
    // The blamed variable's changes, all four, come first.
    for (std::size_t i = 0; i < 4; ++i) CHECK(moves[i].front().variable == 3);
  }
}

TEST_CASE("kicks: a settled search goes on from its best plan perturbed, never behind",
          "[search][plan_search]") {
  // resnet_tiny at 25,600 bytes settles in well under a second; with kicks (Note [Kicks] in
  // local_search.cpp) it searches on from its best plan with changes drawn by blame until four
  // kicks in a row find nothing better. Same seed, deterministic: the kicks start where the
  // search without them ends, so they can only add.
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const Machine m = test_machine(25600, 16e9, 10000);
  SearchOptions o = quick(2, true);
  o.kicks = false;
  const SearchResult settled = search_plan(w, m, o);
  o.kicks = true;
  const SearchResult kicked = search_plan(w, m, o);
  REQUIRE(settled.converged);
  REQUIRE(kicked.converged);
  REQUIRE(!settled.within_gap);
  CHECK(kicked.rounds > settled.rounds);
  // Its searches settle on full sweeps of pairs or triples: one pass (Note [Passes]).
  CHECK(settled.passes == 1);
  CHECK(kicked.passes == 1);
  CHECK_FALSE(better(settled.evaluation, kicked.evaluation));
  o.threads = 1;
  CHECK(search_plan(w, m, o).plan == kicked.plan);
}

TEST_CASE("passes: a search settled on sampled pairs kicks again with other draws, never behind",
          "[search][plan_search]") {
  // A random chain of 60 layers (40 maps) has too many pairs of changes to sweep (Note [Plan
  // search], widening): its searches settle on sampled pairs, and the time left goes to passes
  // of kicks with other draws (Note [Passes] in local_search.cpp). With one pass the search is
  // the other's first pass (same seed, deterministic): it is never better, with fewer rounds.
  const ExactInstance inst = exact_instance(5, 60, 60);
  REQUIRE(find_feature_maps(inst.workload).size() == 40);
  SearchOptions o = quick(2, true);
  o.gap = 0;             // not stopped by the lower bound
  o.max_passes = 2;      // the second pass is what is checked
  o.time_limit_s = 600;  // converges in 6 s (32 s under ASan): the limit must not end it
  const SearchResult passed = search_plan(inst.workload, inst.machine, o);
  REQUIRE(passed.converged);
  CHECK(passed.passes == 2);
  o.max_passes = 1;
  const SearchResult one = search_plan(inst.workload, inst.machine, o);
  REQUIRE(one.converged);
  CHECK(one.passes == 1);
  CHECK_FALSE(better(one.evaluation, passed.evaluation));
  CHECK(passed.rounds > one.rounds);
}

TEST_CASE("the search changes an op's algorithm where the optimum needs it",
          "[search][plan_search]") {
  // resnet_tiny at 25,600 bytes: vDNN's ladder gives up and no policy of feature maps fits
  // (policies_test; the offload policies, which move weights off the device, do); the optimum
  // over feature maps and algorithms (exact mode) runs a convolution on its memory-optimal
  // algorithm, which only a search that changes algorithms reaches.
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const Machine m = test_machine(25600, 16e9, 10000);
  const Comparison c = compare_policies(w, m);
  for (const ComparisonRow& row : c.rows) {
    CAPTURE(row.policy);
    const bool offloads = row.decision.plan.host_update || !row.decision.plan.host_tensors.empty();
    CHECK(row.timeline.feasible == offloads);
  }
  SearchOptions o = quick(2, true);
  o.host_placement = false;
  const SearchResult r = search_plan(w, m, o);
  REQUIRE(r.evaluation.feasible);
  CHECK_FALSE(r.plan.algorithms.empty());
  ExactOptions exact;
  exact.threads = 2;
  CHECK(r.evaluation.iteration_ns == solve_exact(w, m, exact).evaluation.iteration_ns);
}

TEST_CASE("the search prefetches a host-placed batch at its use where only that fits",
          "[search][plan_search]") {
  // AlexNet's case in small (docs/simulator.md, Host placement: figures): the batch x is read by
  // the first layer and by its backward op g1, which runs right after g2, the step's peak.
  //   f1 [op 0]: x (4096 B) -> a (512)      g2 [op 2]: y, a -> d_a (512), workspace 8192
  //   f2 [op 1]: a -> y (512)               g1 [op 3]: d_a, x -> d_x (512)
  // At g2 the device needs a, y, d_a and the workspace: 9728 B; with x too, 13,824 B (the in-core
  // peak), more than the 13,312 B device, whatever the plan does with a and y (g2 reads both). On
  // the host with its backward copy prefetched one op ahead (the default, at g2) or earlier, x is
  // there at g2 all the same. Only a copy issued at g1 itself fits: the arena then holds a at
  // [4096, 4608), y at [0, 512), d_a at [512, 1024) and the workspace at [4608, 12800): its end.
  WorkloadBuilder b;
  const TensorId x = b.input("x", 4096);
  const TensorId a = b.forward("f1", {x}, 512, 1000);
  const TensorId y = b.forward("f2", {a}, 512, 1000);
  b.op("g2", "linear", Phase::kBackward, {y, a}, {{"d_a", 512}}, 1000, 8192);
  const TensorId d_a{3};
  b.backward("g1", {d_a, x}, 512, 1000);
  const Workload w = b.build();
  const Machine m = test_machine(13312, 1e9, 0);
  const SearchResult r = search_plan(w, m, quick(2, true));
  REQUIRE(r.evaluation.feasible);
  CHECK(r.plan.host_tensors == std::vector<TensorId>{x});
  CHECK(r.plan.host_prefetches == std::vector<HostPrefetch>{{x, OpId{3}, OpId{3}}});
  CHECK(r.evaluation.peak_reserved_bytes == 12800);
  CHECK_NOTHROW(validate_plan(r.plan, w, "searched plan"));
  // Without host placement nothing fits.
  SearchOptions o = quick(2, true);
  o.host_placement = false;
  CHECK_FALSE(search_plan(w, m, o).evaluation.feasible);
}

TEST_CASE("the search places one optimizer state on the host where moving every one costs more",
          "[search][plan_search]") {
  // Two layers, each a parameter w with momentum m; m2 is 16 KiB, the rest 1 KiB; g2 reads both
  // maps and takes an 8 KiB workspace: the step's peak, where every parameter and state is on
  // the device too. The host updates at 1 MB/s, so an update there costs over 20 ms against the
  // device's 2 us. On a device 6 KiB under the in-core peak neither the maps (g2 reads both) nor
  // the parameters (2 KiB) nor the batch (1 KiB) make room; every state with the update on the
  // host does, slowly; m2 alone on the host, brought back for its update op, does at the cost of
  // its copies. Only a variable per state reaches that plan.
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1024);
  const TensorId w1 = b.parameter("w1", 1024);
  const TensorId w2 = b.parameter("w2", 1024);
  const TensorId m1 = b.parameter("m1", 1024);
  const TensorId m2 = b.parameter("m2", 16384);
  b.workload().tensors[index(m1)].kind = TensorKind::kOptimizerState;
  b.workload().tensors[index(m2)].kind = TensorKind::kOptimizerState;
  const TensorId a = b.forward("f1", {x, w1}, 1024, 1000);
  const TensorId y = b.forward("f2", {a, w2}, 1024, 1000);
  b.op("g2", "linear", Phase::kBackward, {y, a, w2}, {{"gw2", 1024}, {"d_a", 1024}}, 1000, 8192);
  const TensorId gw2 = TensorId{7};
  const TensorId d_a = TensorId{8};
  const TensorId gw1 = b.backward("g1", {d_a, x, w1}, 1024, 1000);
  b.op("sgd1", "sgd", Phase::kUpdate, {w1, gw1, m1}, {}, 1000);
  b.op("sgd2", "sgd", Phase::kUpdate, {w2, gw2, m2}, {}, 1000);
  const Workload w = b.build();
  REQUIRE(w.tensor(gw2).name == "gw2");
  Machine m = test_machine(kPlenty, 1e9, 0);
  const Simulation in_core = simulate(w, in_core_plan(w), m);
  REQUIRE(in_core.timeline.feasible);
  m.memory_bytes = in_core.timeline.peak_reserved_bytes - 6144;
  m.host_bandwidth_bytes_per_s = 1e6;
  Plan one = in_core_plan(w);  // m2 alone on the host fits
  one.host_tensors = {m2};
  CHECK(simulate(w, one, m).timeline.feasible);
  const SearchResult r = search_plan(w, m, quick(2, true));
  REQUIRE(r.evaluation.feasible);
  CHECK_FALSE(r.plan.host_update);
  CHECK(std::find(r.plan.host_tensors.begin(), r.plan.host_tensors.end(), m2) !=
        r.plan.host_tensors.end());
  CHECK_NOTHROW(validate_plan(r.plan, w, "searched plan"));
  // Every state and gradient on the host with the update there (what the search's placement
  // variables reached before): it fits, and its step is the host update's.
  const Plan offload = zero_offload_plan(w);
  const Simulation slow = simulate(w, offload, m);
  REQUIRE(slow.timeline.feasible);
  CHECK(r.evaluation.iteration_ns * 10 < slow.timeline.iteration_ns);
}

TEST_CASE("the search updates on the device with the gradients on the host where they outgrow it",
          "[search][plan_search]") {
  // Two layers, each a parameter w (1 KiB) with momentum m (512 B) and a 16 KiB gradient; g2
  // writes gw2, an activation's backward op follows, then g1 writes gw1 with an 8 KiB workspace,
  // and both wait on the device for the update, one fused op (a foreach SGD) after the input's
  // gradient: at g1 both are live beside the workspace, the step's peak. The host updates at
  // 1 MB/s (over 20 ms against the device's 3 us).
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1024);
  const TensorId w1 = b.parameter("w1", 1024);
  const TensorId w2 = b.parameter("w2", 1024);
  const TensorId m1 = b.optimizer_state("m1", 512);
  const TensorId m2 = b.optimizer_state("m2", 512);
  const TensorId a = b.forward("f1", {x, w1}, 1024, 1000);
  const TensorId y = b.forward("f2", {a, w2}, 1024, 1000);
  b.op("g2", "linear", Phase::kBackward, {y, a, w2}, {{"gw2", 16384}, {"d_a", 1024}}, 1000);
  const TensorId gw2 = TensorId{7};
  const TensorId d_a = TensorId{8};
  const TensorId d_x = b.backward("act", {d_a, a}, 1024, 1000);
  const OpId g1 =
      b.op("g1", "linear", Phase::kBackward, {d_x, x, w1}, {{"gw1", 16384}}, 1000, 8192);
  const TensorId gw1 = b.workload().ops[index(g1)].outputs.front();
  b.backward("g0", {d_x}, 1024, 1000);  // the input's gradient, after which the update is issued
  b.op("sgd", "sgd", Phase::kUpdate, {w1, w2, gw1, gw2, m1, m2}, {}, 1000);
  const Workload w = b.build();
  REQUIRE(w.tensor(gw2).name == "gw2");
  Machine m = test_machine(kPlenty, 1e9, 0);
  m.host_bandwidth_bytes_per_s = 1e6;
  // The gradients on the host (each copied out once written, back for its update op) with the
  // states (what the update on the host needs too) and the update on the device.
  Plan moved = in_core_plan(w);
  set_host_placement(moved, w, TensorKind::kGradient, true);
  set_host_placement(moved, w, TensorKind::kOptimizerState, true);
  const Simulation fits = simulate(w, moved, m);
  REQUIRE(fits.timeline.feasible);
  m.memory_bytes = fits.timeline.peak_reserved_bytes;
  CAPTURE(m.memory_bytes);
  // At that device neither the plan in core, nor the states alone on the host, nor any plan of
  // the maps (1 KiB each) fits; every state and gradient with the update on the host does, slowly.
  CHECK_FALSE(simulate(w, in_core_plan(w), m).timeline.feasible);
  Plan states = in_core_plan(w);
  set_host_placement(states, w, TensorKind::kOptimizerState, true);
  CHECK_FALSE(simulate(w, states, m).timeline.feasible);
  const Simulation slow = simulate(w, zero_offload_plan(w), m);
  REQUIRE(slow.timeline.feasible);
  const SearchResult r = search_plan(w, m, quick(2, true));
  REQUIRE(r.evaluation.feasible);
  CHECK_FALSE(r.plan.host_update);
  CHECK(std::find(r.plan.host_tensors.begin(), r.plan.host_tensors.end(), gw1) !=
        r.plan.host_tensors.end());
  CHECK(r.evaluation.iteration_ns * 10 < slow.timeline.iteration_ns);
  CHECK_NOTHROW(validate_plan(r.plan, w, "searched plan"));
  // The seeding offers the in-core plan so moved as a start (Seeding::state_on_host).
  const SearchOptions options = quick(2, true);
  engine::Reporter report(options, std::chrono::steady_clock::now());
  const engine::Seeding seeding =
      engine::seed_with_policies(w, m, NetworkView(w), options, Stop{}, 10, report);
  CHECK(std::any_of(seeding.state_on_host.begin(), seeding.state_on_host.end(), [](const auto& s) {
    return s.policy == "in-core, state and gradients on the host";
  }));
}

TEST_CASE("searched plans keep the plan rules across maps (no lossy map read by a re-run op)",
          "[search][plan_search]") {
  // With every encoding on, many neighbours of a plan narrow or binarize a map that a recomputed
  // map's regeneration reads in forward (a ReLU output binarized for a max-pool that is re-run);
  // validate_plan refuses such plans, so neither search may return one.
  // Random instances where, without the rule, both searches returned refused plans.
  for (std::uint64_t seed : {25, 37}) {
    CAPTURE(seed);
    const ExactInstance inst = exact_instance(seed, 4, 10);
    SearchOptions o = quick(2, true);
    o.encodings = parse_encoding_options("all", "test");
    // Exact mode's space (solve_exact): a release point off a map's last forward use lies outside
    // it, and beats its optimum on seed 25 (the search's moves of a stalled copy find one).
    o.host_placement = false;
    o.release_points = false;
    const SearchResult r = search_plan(inst.workload, inst.machine, o);
    CHECK_NOTHROW(validate_plan(r.plan, inst.workload, "searched plan"));
    ExactOptions exact;
    exact.threads = 2;
    exact.encodings = o.encodings;
    const ExactResult e = solve_exact(inst.workload, inst.machine, exact);
    CHECK_NOTHROW(validate_plan(e.plan, inst.workload, "exact plan"));
    CHECK_FALSE(better(r.evaluation, e.evaluation));
  }
}

TEST_CASE("a cancelled search returns the best seed so far and says so", "[search][plan_search]") {
  const Workload w = net();
  const Bytes incore =
      simulate(w, in_core_plan(w), test_machine(Bytes{1} << 40)).timeline.peak_reserved_bytes;
  const Machine m = test_machine(incore * 7 / 10, 2e8, 1000);
  SECTION("cancelled before it starts: only in-core (which always seeds) decides") {
    const std::atomic<bool> cancel{true};
    SearchOptions o = quick(2, true);
    o.cancel = &cancel;
    const SearchResult r = search_plan(w, m, o);
    CHECK(r.cancelled);
    CHECK_FALSE(r.converged);
    CHECK(r.rounds == 0);
    CHECK(r.best_policy == "in-core");
    // Every other policy is listed as skipped, in policies() order, with the reason.
    REQUIRE(r.skipped.size() == memplan::test::unsharded_policy_count() - 1);
    CHECK(r.skipped.front().policy == policies()[1].name);
    for (const SkippedPolicy& s : r.skipped) CHECK(s.reason == "cancelled");
  }
  SECTION("cancelled from the progress callback after the first round") {
    std::atomic<bool> cancel{false};
    std::vector<std::string> stages;
    SearchOptions o = quick(2, true);
    o.cancel = &cancel;
    o.on_progress = [&](const SearchProgress& p) {
      stages.push_back(p.stage);
      if (p.stage == "round") cancel = true;
    };
    const SearchResult r = search_plan(w, m, o);
    CHECK(r.cancelled);
    CHECK(r.rounds == 1);
    CHECK(r.skipped.empty());
    // One "seeding" call per policy, then the one round.
    REQUIRE(stages.size() == memplan::test::unsharded_policy_count() + 1);
    CHECK(std::count(stages.begin(), stages.end(), "seeding") ==
          static_cast<std::ptrdiff_t>(memplan::test::unsharded_policy_count()));
    CHECK(stages.back() == "round");
    // The best plan so far is at least the best seed's.
    CHECK_FALSE(better(r.best_policy_evaluation, r.evaluation));
  }
}

TEST_CASE("compare reports progress per policy and can be cancelled", "[search][comparison]") {
  const Workload w = net();
  const Machine m = test_machine(Bytes{1} << 40, 2e8, 1000);
  ComparisonOptions o;
  o.threads = 2;
  std::vector<std::size_t> done;
  o.on_progress = [&](const ComparisonProgress& p) {
    CHECK(p.total == memplan::test::unsharded_policy_count());
    CHECK(find_policy(p.policy) != nullptr);
    done.push_back(p.done);
  };
  const Comparison c = compare_policies(w, m, o);
  CHECK_FALSE(c.cancelled);
  REQUIRE(c.rows.size() == memplan::test::unsharded_policy_count());
  for (std::size_t i = 0; i < c.rows.size(); ++i) CHECK(c.rows[i].policy == policies()[i].name);
  // One call per policy, counting 1, 2, ... in the order they finished.
  REQUIRE(done.size() == memplan::test::unsharded_policy_count());
  for (std::size_t i = 0; i < done.size(); ++i) CHECK(done[i] == i + 1);

  const std::atomic<bool> cancel{true};
  o.cancel = &cancel;
  o.on_progress = nullptr;
  const Comparison cancelled = compare_policies(w, m, o);
  CHECK(cancelled.cancelled);
  CHECK(cancelled.rows.empty());
}

TEST_CASE("fitting is monotone in device memory for random plans on random steps",
          "[search][property]") {
  // Random plans (keep, swap with a random prefetch point, recompute; fixed seeds) on the random
  // training steps of exact_instances. A plan fits exactly when its peak arena end on a device
  // without a memory limit is at most the capacity (Note [Arena top block]), so it fits at every
  // capacity above one where it fits: checked at capacities around that peak, 512 bytes apart.
  std::size_t plans = 0;
  for (std::uint64_t seed = 1; seed <= 25; ++seed) {
    CAPTURE(seed);
    const ExactInstance inst = exact_instance(seed, 4, 12);
    const std::vector<FeatureMap> maps = find_feature_maps(inst.workload);
    std::mt19937_64 rng(seed);
    for (int k = 0; k < 8; ++k) {
      Plan plan = in_core_plan(inst.workload);
      for (std::size_t m = 0; m < maps.size(); ++m) {
        Decision& d = plan.decisions[m];
        d.action = static_cast<Action>(rng() % 3);  // keep, swap, recompute
        if (d.action == Action::kSwap && rng() % 2 == 0) {
          const OpId after = maps[m].forward_uses.empty()
                                 ? inst.workload.tensor(maps[m].tensor).producer
                                 : maps[m].forward_uses.back();
          const OpId before = maps[m].backward_uses.front();
          d.prefetch_before =
              after + 1 +
              static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(before - after));
        }
        if (!decision_problem(d, maps[m], inst.workload).empty()) {
          d.action = Action::kKeep;
          d.prefetch_before = kNoOp;
        }
      }
      if (lossy_map_recomputed_from(plan, maps, inst.workload)) continue;
      Machine unlimited = inst.machine;
      unlimited.memory_bytes = Bytes{1} << 40;
      const Timeline free = simulate(inst.workload, plan, unlimited).timeline;
      REQUIRE(free.feasible);
      for (Bytes capacity = free.peak_reserved_bytes - 512 * 8;
           capacity <= free.peak_reserved_bytes + 512 * 8; capacity += 512) {
        CAPTURE(capacity, free.peak_reserved_bytes);
        Machine m = inst.machine;
        m.memory_bytes = capacity;
        const Timeline t = simulate(inst.workload, plan, m).timeline;
        CHECK(t.feasible == (capacity >= free.peak_reserved_bytes));
        if (t.feasible) CHECK(t.iteration_ns == free.iteration_ns);
      }
      ++plans;
    }
  }
  CHECK(plans > 100);
}
