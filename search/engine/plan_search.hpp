#pragma once
// The plan-search engine: starts from every policy's plan and improves on the best one by
// parallel local search, with the simulator as the oracle (Note [Plan search] in plan_search.cpp).
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "search/bound/lower_bound.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/gist.hpp"
#include "sim/simulation.hpp"

namespace memplan::search {

struct SearchProgress {
  /// "seeding": a policy's plan was simulated, or the policy was skipped (`policy` names it);
  /// "round": a round of the local search ended.
  std::string stage;
  std::string policy;
  std::size_t round = 0;
  std::size_t evaluated = 0;
  Evaluation best;
  double elapsed_s = 0.0;
};

struct SearchOptions {
  int threads = 0;  // 0: every core
  /// Wall-clock budget of the whole search, seeding included (Note [Plan search], seeding).
  double time_limit_s = 10.0;
  std::size_t max_rounds = 0;  // 0: no limit besides convergence and time
  std::uint64_t seed = 1;
  /// Same plan for any thread count: the candidate batch size no longer grows with the threads.
  bool deterministic = false;
  /// Whether plans may place tensors that are not feature maps on the host (Note [Host placement]
  /// in core/plan.hpp): the offload policies seed, and the neighbourhood moves every parameter,
  /// every gradient and optimizer state with the update, or every input batch to the host. Exact
  /// mode turns it off: its space is feature maps and algorithms (Note [Exact plan search]).
  bool host_placement = true;
  /// Whether swapped maps' release points move (Note [Release point] in core/plan.hpp): the
  /// neighbourhood moves them, and seeds keep the points their policies chose. Off, every swapped
  /// map is freed at its last forward use; exact mode turns it off (Note [Exact plan search]).
  bool release_points = true;
  /// Whether a round takes the sum of its improving moves where that is better (Note [Combined
  /// improvements] in search/engine/local_search.cpp) and an idle round repairs the faster plans
  /// that do not fit (Note [Repair chains]); off: one move a round (tests compare the two).
  bool compound_moves = true;
  /// Whether, once every start has settled, the time left goes to local searches from the best
  /// plan perturbed (Note [Kicks] in search/engine/local_search.cpp), in passes of kicks with
  /// other draws (Note [Passes] there); off: the search ends there (exact mode's heuristic,
  /// whose time is the branch and bound's; tests compare the two).
  bool kicks = true;
  /// With kicks, the most passes of kicks (Note [Passes]); at least 1.
  std::size_t max_passes = 8;
  EncodingOptions encodings;
  /// Called after every seeding policy (from the worker that ran it) and after every round (from
  /// the driving thread); one call at a time.
  std::function<void(const SearchProgress&)> on_progress;
  /// When set and it becomes true, the search stops: the policy being decided at its next
  /// simulation, the rounds at the next round or chunk boundary. The result is the best plan so
  /// far and says `cancelled`.
  const std::atomic<bool>* cancel = nullptr;
  /// When the local search ends with no plan that fits and the workload has at most this many
  /// feature maps, exact mode (search/engine/exact.hpp) searches on from its result in the time
  /// left (Note [Plan search], fallback); 0: never.
  std::size_t exact_fallback_maps = 12;
  /// When each collective of the workload may start: the rank's peers' latest arrivals, for a
  /// rank of a job priced with the other ranks fixed (Note [A rank among fixed peers] in
  /// search/oracle/evaluator.hpp); every Evaluator of the search and the winner's simulation use
  /// them. Empty: each collective starts on its arrival.
  std::vector<sim::Nanoseconds> collective_ready_ns;
  /// Stop once the best plan is within this fraction of the lower bound (its step / bound - 1 at
  /// most `gap`, Note [Plan search], stopping within the gap): no plan of the space is more than
  /// that faster. Only where the bound bounds what the search minimises: a step without a host
  /// side (whose step back to back is its step alone), priced alone. 0: stop only on reaching the
  /// bound itself; below 0, never. A job's search (search/studies/job_search.hpp) takes it of the
  /// job's bound.
  double gap = 0.005;
};

/// A policy whose plan did not seed the search: the time limit's seeding share ran out (or the
/// search was cancelled) before it finished deciding.
struct SkippedPolicy {
  std::string policy;
  std::string reason;
};

struct SearchResult {
  sim::Plan plan;
  sim::Simulation simulation;  // the plan's, with every record kept
  Evaluation evaluation;
  std::string best_policy;  // the policy whose plan the search started from
  Evaluation best_policy_evaluation;
  std::size_t evaluated = 0;  // plans simulated, policies' own simulations included
  std::size_t rounds = 0;
  std::size_t passes = 0;              // passes of the local search's kicks (Note [Passes])
  bool converged = false;              // stopped because no move improved, not because of a limit
  bool within_gap = false;             // stopped because the plan is within SearchOptions::gap
  bool cancelled = false;              // SearchOptions::cancel stopped it
  bool exact_fallback = false;         // exact mode ran: the local search found nothing that fits
  std::vector<SkippedPolicy> skipped;  // policies that did not seed it, in policies() order
  /// No plan of the search's space that fits is faster (search/bound/lower_bound.hpp), for the
  /// plan's gap; nullopt for a rank priced among fixed peers (collective_ready_ns).
  std::optional<LowerBound> lower_bound;
  double elapsed_s = 0.0;
};

/// Ranks evaluations: a plan that fits beats one that does not; then a shorter step (the period
/// back to back, Evaluation::step_ns), then a shorter step alone, then less peak memory; between
/// plans that do not fit, fewer bytes missing.
bool better(const Evaluation& a, const Evaluation& b);

SearchResult search_plan(const sim::Workload& workload, const sim::Machine& machine,
                         const SearchOptions& options);

/// Why the search stopped, in a few words: "converged", "within 0.5% of the lower bound" (the
/// gap it was given), "cancelled" or "stopped by a limit".
std::string stop_reason(const SearchResult& result, double gap);

}  // namespace memplan::search
