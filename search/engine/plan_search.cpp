// Note [Plan search]
// The search treats the simulator as an oracle and a plan as a point in a discrete space of
// variables: one action per feature map (keep, swap, recompute, and the encodings enabled), for
// swapped maps the op before which the prefetch is issued, and for every op with alternative
// algorithms (vDNN's fastest or memory-optimal convolution) which of them it runs.
//
// Seeding. Every policy of policies() decides (with the enabled encodings applied); each plan is
// simulated; the best is the incumbent. The search therefore never returns anything worse than
// the best policy that seeded it. The time limit covers the whole search: the policies decide in
// parallel (one task and one Evaluator each), cheapest first (Policy::cost), and may use
// kSeedingShare of the limit; an Evaluator whose Stop is due throws Stopped at its next
// simulation, so a policy still deciding then (PoocH on thousands of maps under a short limit)
// is abandoned and the result lists it as skipped, with why. The first policy (in-core, which
// simulates nothing) always seeds. With a limit long enough for every policy, the seeds and hence
// the result do not depend on timing. SearchOptions::cancel stops seeding the same way, and the
// rounds at their next round or chunk boundary.
//
// Rounds. Each round builds the neighbourhood of the incumbent: every single-map change of action
// (a change to swap comes with its default prefetch point and with prefetches 4, 16, 64 and 256
// ops ahead of the first backward use, or with every point when the map's prefetch window is at
// most kEveryPrefetchPoint ops long); for swapped maps, moving the prefetch earlier (by 1, 4, 16
// or 64 ops) or later (by 1), or anywhere in a short window; and every other algorithm of each op
// that has alternatives; and the placement of the tensors that are not feature maps (Note [Host
// placement] in core/plan.hpp), three variables of two values each: every parameter on the host or
// none; every gradient and optimizer state on the host with the update on the host, or none (or
// the update back on the device with the states left on the host, or the gradients too, which
// then may come back alone); every input batch on the host
// or none (parameters and inputs are placed with their groups' default prefetch points, or with
// every group prefetched at its first use); with the update on the device, each optimizer state
// on its own (brought back for its update op: a plan moves just what it must, the LM head's Adam
// state of a GPT where the logits fill the device); and for each group of uses
// of a host-placed tensor, its prefetch point: earlier or later by 1, 4 or 16 ops within its
// window, at the first use itself, or back to the default. When the neighbourhood is larger than
// the batch, a batch of distinct changes is drawn from it with a seeded generator, without
// replacement (a map whose stalls dominate the step drew its few changes over and over: most of
// a batch on MobileNetV2 b128 at 25% of its feature-map bytes), favouring the variables the
// incumbent's timeline blames (stalls on a map or a host-placed tensor, a map resident, a
// host-placed tensor's copy resident ahead of its use or an op's workspace where memory ran out);
// to it are added the moves of the copies that stall the incumbent most (Note [Moves the stalls
// ask for] in local_search.cpp). The batch is evaluated in parallel (oneTBB, parallel_each; one
// Evaluator, hence one Engine, per worker thread) and the best candidate that improves on the
// incumbent (ties broken by batch position) becomes the new incumbent, and the next round
// samples again. With compound moves
// (SearchOptions::compound_moves) the round's improving moves summed may be taken instead, and a
// round that improves nothing first repairs its faster candidates that ran out of memory (Notes
// [Combined improvements] and [Repair chains] in local_search.cpp).
//
// Widening. A round in which nothing improves widens the neighbourhood of the next one: every
// single change (up to kFullSweepCap; then each map's action change again with the maps its op
// also writes: Note [Sibling moves] in neighbourhood.cpp), then every pair of changes to two
// variables, then every triple, as long as there are at most kPairSweepCap pairs and
// kTripleSweepCap triples; a sweep is evaluated in chunks of kSweepChunk and stops at the first
// chunk that holds an improvement. A local optimum of the exact optimum's small instances is
// typically two or three coordinated changes away from it (keep one map, recompute its
// neighbour, move a prefetch by one op), which single moves and sampled pairs rarely reach
// (docs/search.md). When a sweep finds nothing, the
// search has settled: no triple of changes improves the plan. When the pairs are too many to
// sweep (networks of hundreds of maps), pairs are sampled instead, and kRandomPairRounds idle
// rounds of them settle the search.
//
// Restarts. The local search runs from the best policy's plan, then from the second and third
// best (those that fit) while the time limit and the round limit allow (a policy's plan that does
// not fit with the update on the device is offered again with every optimizer state on the host,
// brought back for its update op, else with every gradient there too: a start where that fits,
// though no policy's plan); the best plan
// any of them reaches is the result; a restart still far slower than the best plan after a few
// rounds gives way (Note [Hopeless restarts] in local_search.cpp). A local optimum reached from one
// policy's plan is often not one from another's (ResNet-50 batch 512, PCIe 3: from PoocH's plan
// alone the search stops at +21.9% against the ideal device). When every start has settled, the
// time left goes to searches from the best plan perturbed (Note [Kicks] in local_search.cpp;
// SearchOptions::kicks), in passes of kicks with other draws (Note [Passes] there).
//
// Determinism. Candidates are generated by the driving thread from (seed, round) before any is
// evaluated, and evaluation is a pure function of the plan, so the outcome does not depend on
// scheduling. The batch size is kBatchPerThread x threads, so the same seed and thread count give
// the same plan; --deterministic fixes the batch size, so any thread count gives the same plan.
//
// Fallback. When the local search ends with no plan that fits and the workload has at most
// SearchOptions::exact_fallback_maps feature maps, exact mode's branch and bound (Note [Exact plan
// search] in exact.cpp) searches on from the local search's result in the time left, so a plan
// that fits is found whenever one exists and the time allows.
//
// Stopping within the gap. The lower bound (search/bound/) is computed before the seeding; when the
// best plan's step is within SearchOptions::gap of it, no plan of the space is more than that
// faster, and the local search stops at its next round (so a step that fits in core stops after
// the seeding: its in-core plan is at the bound). The step the search ranks by is the step back to
// back: for a step with a host side its own bound (Note [A bound on the step back to back] in
// search/bound/lower_bound.cpp), for one without the step alone's, which is the same step. None
// for a rank among fixed peers (no bound). The stop depends on the plans evaluated only, so
// --deterministic gives the same plan.
//
// Composition. The engine's two entry points are this file's, over one driver, solve(): seeding
// (seeding.cpp), the local search (local_search.cpp, over the moves of neighbourhood.cpp), then
// the branch and bound (exact.cpp) — for search_plan as the fallback, for solve_exact always, with
// the local search's plan as the incumbent to beat. The branch and bound never runs the local
// search itself, and the winner is simulated once, at the end, with every record kept.
#include "search/engine/plan_search.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <oneapi/tbb/task_arena.h>

#include "core/input_error.hpp"
#include "search/engine/exact.hpp"
#include "search/engine/local_search.hpp"
#include "search/engine/seeding.hpp"
#include "search/parallel.hpp"
#include "search/policies/network_view.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

bool better(const Evaluation& a, const Evaluation& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (a.feasible) {
    if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
    if (a.iteration_ns != b.iteration_ns) return a.iteration_ns < b.iteration_ns;
    return a.peak_bytes < b.peak_bytes;
  }
  if (a.excess_bytes != b.excess_bytes && a.excess_bytes > 0 && b.excess_bytes > 0)
    return a.excess_bytes < b.excess_bytes;  // closer to fitting (Evaluation::excess_bytes)
  if (a.oom_bytes_missing != b.oom_bytes_missing) return a.oom_bytes_missing < b.oom_bytes_missing;
  return a.oom_op > b.oom_op;  // ran further before memory ran out
}

namespace {

// The share of the time limit that the seeding policies may take (Note [Plan search], seeding).
constexpr double kSeedingShare = 0.5;

int thread_count(int threads) {
  return threads > 0 ? threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seeding, then the local search from the seeds (Note [Plan search]); the plan is not simulated.
SearchResult local_search(const sim::Workload& workload, const sim::Machine& machine,
                          const NetworkView& view, const SearchOptions& options, int threads,
                          std::chrono::steady_clock::time_point start,
                          std::optional<sim::Nanoseconds> good_enough_ns) {
  tbb::task_arena arena(arena_concurrency(threads));
  engine::Reporter report(options, start);
  SearchResult result;

  // Seeding, inside the arena: policies that simulate in parallel use its threads.
  const double seeding_s = kSeedingShare * options.time_limit_s;
  const Stop seeding_stop{engine::deadline_after(start, seeding_s), options.cancel};
  engine::Seeding seeding;
  arena.execute([&] {
    seeding = engine::seed_with_policies(workload, machine, view, options, seeding_stop, seeding_s,
                                         report);
  });
  const engine::Seed& best = seeding.seeds.front();
  result.plan = best.plan;
  result.evaluation = best.evaluation;
  result.best_policy = best.policy;
  result.best_policy_evaluation = best.evaluation;
  result.skipped = seeding.skipped;

  const Stop stop{engine::deadline_after(start, options.time_limit_s), options.cancel};
  engine::LocalSearch local(workload, machine, view, options, threads, stop, report, result,
                            good_enough_ns);
  std::vector<engine::Seed> starts = seeding.seeds;
  starts.insert(starts.end(), seeding.state_on_host.begin(), seeding.state_on_host.end());
  std::stable_sort(starts.begin(), starts.end(), engine::ranks_before);
  result.converged = local.run(starts);
  result.cancelled = stop.cancelled();
  if (result.cancelled) result.converged = false;
  result.within_gap = local.within_gap();
  result.evaluated = seeding.evaluated + local.evaluated();
  result.plan.policy = "search";
  return result;
}

// What the branch and bound adds to search_plan's result as its fallback (Note [Plan search],
// fallback).
void take_fallback(const ExactResult& exact, SearchResult& result) {
  result.exact_fallback = true;
  result.evaluated = exact.evaluated;
  if (better(exact.evaluation, result.evaluation)) {
    result.plan = exact.plan;
    result.plan.policy = "search";
    result.evaluation = exact.evaluation;
  }
  result.converged = exact.optimal;
}

// The winner simulated with every record kept, its collectives at the search's ready times.
sim::Simulation simulate_winner(const sim::Workload& workload, const sim::Plan& plan,
                                const sim::Machine& machine, const SearchOptions& options) {
  sim::EngineOptions engine;
  engine.collective_ready_ns = options.collective_ready_ns;
  return sim::simulate_plan(workload, plan, machine, engine);
}

// When the branch and bound runs after the local search (Note [Plan search], composition).
enum class Tree { kFallback, kAlways };

struct Solved {
  SearchResult search;               // the local search's, with the fallback's winner taken
  std::optional<ExactResult> exact;  // the branch and bound's, when it ran
};

// Seeding, the local search, then the branch and bound when `tree` asks for it; the winner is
// simulated once (Note [Plan search], composition).
Solved solve(const sim::Workload& workload, const sim::Machine& machine,
             const SearchOptions& options, Tree tree, const ExactOptions& exact_options,
             std::chrono::steady_clock::time_point start,
             std::optional<sim::Nanoseconds> good_enough_ns = std::nullopt) {
  const int threads = thread_count(options.threads);
  const NetworkView view(workload);
  Solved out{local_search(workload, machine, view, options, threads, start, good_enough_ns),
             std::nullopt};
  SearchResult& result = out.search;
  if (tree == Tree::kAlways) {
    out.exact = branch_and_bound(workload, machine, exact_options, result);
    out.exact->simulation = simulate_winner(workload, out.exact->plan, machine, options);
    return out;
  }
  const double left = options.time_limit_s - seconds_since(start);
  if (!result.evaluation.feasible && !result.cancelled &&
      view.feature_maps().size() <= std::min(options.exact_fallback_maps, kExactMaxMaps) &&
      left > 0) {
    ExactOptions eo;
    eo.threads = threads;
    eo.time_limit_s = left;
    eo.encodings = options.encodings;
    eo.collective_ready_ns = options.collective_ready_ns;
    out.exact = branch_and_bound(workload, machine, eo, result);
    take_fallback(*out.exact, result);
  }
  result.simulation = simulate_winner(workload, result.plan, machine, options);
  return out;
}

// The lower bound over the plans the options allow (search/bound/lower_bound.hpp); none for a
// rank among fixed peers, whose collectives' waits it does not model.
std::optional<LowerBound> bound_for(const sim::Workload& workload, const sim::Machine& machine,
                                    const SearchOptions& options) {
  if (!options.collective_ready_ns.empty()) return std::nullopt;
  BoundOptions bo;
  bo.encodings = options.encodings;
  bo.host_placement = options.host_placement;
  return lower_bound(workload, machine, bo);
}

// The step at which the search stops (Stopping within the gap, above): within `gap` of the bound
// of the step it ranks plans by, back to back.
std::optional<sim::Nanoseconds> good_enough_ns(const std::optional<LowerBound>& bound, double gap) {
  if (!bound || !bound->fits) return std::nullopt;
  const double ns = static_cast<double>(bound->ranked_bound_ns()) * (1.0 + gap);
  if (ns >= static_cast<double>(sim::kMaxNanoseconds)) return sim::kMaxNanoseconds;
  return static_cast<sim::Nanoseconds>(ns);
}

}  // namespace

SearchResult search_plan(const sim::Workload& workload, const sim::Machine& machine,
                         const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<LowerBound> bound = bound_for(workload, machine, options);
  SearchResult result = solve(workload, machine, options, Tree::kFallback, {}, start,
                              good_enough_ns(bound, options.gap))
                            .search;
  result.lower_bound = bound;
  result.elapsed_s = seconds_since(start);
  return result;
}

std::string stop_reason(const SearchResult& result, double gap) {
  if (result.within_gap) return fmt::format("within {:g}% of the lower bound", gap * 100);
  if (result.converged) return "converged";
  if (result.cancelled) return "cancelled";
  return "stopped by a limit";
}

ExactResult solve_exact(const sim::Workload& workload, const sim::Machine& machine,
                        const ExactOptions& options, const std::string& source) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t maps = NetworkView(workload).feature_maps().size();
  if (maps > kExactMaxMaps) {
    throw sim::InputError(source, fmt::format("the workload has {} feature maps; exact mode solves "
                                              "instances of at most {} (use the heuristic search)",
                                              maps, kExactMaxMaps));
  }
  ExactOptions limited = options;
  if (limited.time_limit_s < 0) limited.time_limit_s = exact_default_time_limit(maps);
  // The heuristic search (which starts from every policy): the incumbent to beat, and the
  // answer when nothing in the space is faster.
  SearchOptions so;
  so.threads = thread_count(limited.threads);
  so.deterministic = true;
  so.time_limit_s = limited.time_limit_s > 0 ? limited.time_limit_s : 600.0;
  so.encodings = limited.encodings;
  so.collective_ready_ns = limited.collective_ready_ns;
  so.host_placement = false;  // S keeps every tensor that is not a feature map on the device
  so.release_points = false;  // and frees every swapped map at its last forward use
  so.kicks = false;           // its time left is the branch and bound's
  const std::optional<LowerBound> bound = bound_for(workload, machine, so);
  ExactResult result = *solve(workload, machine, so, Tree::kAlways, limited, start).exact;
  result.lower_bound = bound;
  result.elapsed_s = seconds_since(start);
  result.time_limit_s = limited.time_limit_s;
  result.default_time_limit = options.time_limit_s < 0;
  return result;
}

}  // namespace memplan::search
