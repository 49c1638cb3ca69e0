#pragma once
// The plan-search engine: starts from every policy's plan and improves on the best one by
// parallel local search, with the simulator as the oracle (Note [Plan search] in plan_search.cpp).
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "search/evaluator.hpp"
#include "search/gist.hpp"
#include "sim/machine.hpp"
#include "sim/plan.hpp"
#include "sim/simulation.hpp"

namespace memplan::search {

struct SearchProgress {
  std::size_t round = 0;
  std::size_t evaluated = 0;
  Evaluation best;
  double elapsed_s = 0.0;
};

struct SearchOptions {
  int threads = 0;             // 0: every core
  double time_limit_s = 10.0;  // wall-clock budget for the improvement rounds
  std::size_t max_rounds = 0;  // 0: no limit besides convergence and time
  std::uint64_t seed = 1;
  /// Same plan for any thread count: the candidate batch size no longer grows with the threads.
  bool deterministic = false;
  EncodingOptions encodings;
  /// Called by the driving thread after every round.
  std::function<void(const SearchProgress&)> on_progress;
  /// When set and true, the search stops at the next round boundary and returns the best plan so
  /// far (not converged), as a time limit would. Python's progress callback sets it.
  const std::atomic<bool>* cancel = nullptr;
};

struct SearchResult {
  sim::Plan plan;
  sim::Simulation simulation;  // the plan's, with every record kept
  Evaluation evaluation;
  std::string best_policy;  // the policy whose plan the search started from
  Evaluation best_policy_evaluation;
  std::size_t evaluated = 0;  // plans simulated, policies' own simulations included
  std::size_t rounds = 0;
  bool converged = false;  // stopped because no move improved, not because of a limit
  double elapsed_s = 0.0;
};

/// Ranks evaluations: a plan that fits beats one that does not; then less time, then less peak
/// memory; between plans that do not fit, fewer bytes missing.
bool better(const Evaluation& a, const Evaluation& b);

SearchResult search_plan(const sim::Workload& workload, const sim::Machine& machine,
                         const SearchOptions& options);

}  // namespace memplan::search
