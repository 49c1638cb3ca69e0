#pragma once
// Exact mode of the plan search: the optimal plan of a small instance, by branch and bound over
// per-map actions with the simulator as the oracle (Note [Exact plan search] in exact.cpp).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/gist.hpp"
#include "sim/simulation.hpp"

namespace memplan::search {

/// Exact mode refuses workloads with more feature maps than this (InputError).
inline constexpr std::size_t kExactMaxMaps = 64;
/// Without a time limit given, exact mode runs to the end on up to this many feature maps (proven
/// in seconds: docs/search.md) and stops after kExactDefaultTimeLimitS beyond, where proving may
/// take far longer than anyone waits.
inline constexpr std::size_t kExactUnlimitedMaps = 16;
inline constexpr double kExactDefaultTimeLimitS = 60.0;

/// The time limit exact mode takes on `maps` feature maps when none is given (0: none).
constexpr double exact_default_time_limit(std::size_t maps) {
  return maps <= kExactUnlimitedMaps ? 0.0 : kExactDefaultTimeLimitS;
}

struct ExactOptions {
  int threads = 0;  // 0: every core
  /// Seconds; 0: none; negative: exact_default_time_limit. When it stops the search the result is
  /// not proven.
  double time_limit_s = -1.0;
  EncodingOptions encodings;
  /// The collectives' ready times every Evaluator uses (SearchOptions::collective_ready_ns).
  std::vector<sim::Nanoseconds> collective_ready_ns;
};

struct ExactResult {
  sim::Plan plan;
  sim::Simulation simulation;  // the plan's, with every record kept
  Evaluation evaluation;
  /// True when the search space was exhausted: no plan of the space is faster (Note).
  bool optimal = false;
  /// The result is the heuristic search's plan (seeded with every policy): nothing in the space is
  /// faster.
  bool from_heuristic = false;
  Evaluation heuristic_evaluation;
  std::string best_policy;
  Evaluation best_policy_evaluation;
  double space_plans = 0.0;       // plans in the space (product of options per map)
  std::size_t explored = 0;       // nodes of the branch-and-bound tree visited
  std::size_t evaluated = 0;      // plans simulated, the heuristic's and policies' included
  std::size_t pruned_memory = 0;  // subtrees cut by the memory lower bound
  std::size_t pruned_time = 0;    // subtrees cut by the time lower bound
  /// Subtrees cut by the lower bound of search/bound/ over the plans with the node's decided maps
  /// (DecidedMapsBound).
  std::size_t pruned_lower_bound = 0;
  /// How often that bound was solved: at the nodes where it was worth its cost (CutOdds,
  /// search/engine/cut_odds.hpp).
  std::size_t lower_bound_solves = 0;
  std::size_t solved_by_bound = 0;  // subtrees whose bounding plan fits (hence is their optimum)
  /// Children whose time bound came out below their parent's: the bound's monotonicity failed
  /// (never observed; counted so that an optimality claim can be checked).
  std::size_t bound_violations = 0;
  /// The lower bound of search/bound/ over the space (no host placement), for the plan's gap;
  /// nullopt for a rank priced among fixed peers.
  std::optional<LowerBound> lower_bound;
  double elapsed_s = 0.0;
  double time_limit_s = 0.0;        // the limit it ran under (0: none)
  bool default_time_limit = false;  // exact_default_time_limit's, none having been given
};

/// The plan of the space of Note [Exact plan search] with the shortest step alone (ties: the first
/// in the tree's order), or the heuristic search's plan when nothing in the space is faster: the
/// heuristic search, then branch_and_bound from its plan (the driver's, Note [Plan search] in
/// plan_search.cpp, composition). Throws InputError naming `source` when the workload has more
/// than kExactMaxMaps feature maps.
ExactResult solve_exact(const sim::Workload& workload, const sim::Machine& machine,
                        const ExactOptions& options, const std::string& source = "search --exact");

/// The branch and bound of Note [Exact plan search] from a heuristic search's result (its plan is
/// the incumbent to beat), in solve_exact and as the plan search's fallback when nothing fits:
/// every field of ExactResult but `simulation` (empty: the driver simulates the winner once) and
/// `elapsed_s`. It runs no heuristic search itself. The workload has at most kExactMaxMaps
/// feature maps (checked).
ExactResult branch_and_bound(const sim::Workload& workload, const sim::Machine& machine,
                             const ExactOptions& options, const SearchResult& heuristic);

}  // namespace memplan::search
