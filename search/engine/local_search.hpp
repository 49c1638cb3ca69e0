#pragma once
// The local search of the plan search (Note [Plan search] in plan_search.cpp, rounds, widening
// and restarts): from one seed after another, rounds of moves drawn from the incumbent's
// neighbourhood and evaluated in parallel, widened to every single change, pair and triple when a
// round finds nothing; then kicks from the best plan in the time left (Note [Kicks]). Internal to
// the search engine (search/engine/).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/task_arena.h>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/engine/neighbourhood.hpp"
#include "search/engine/plan_search.hpp"
#include "search/engine/seeding.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/network_view.hpp"

namespace memplan::search::engine {

// The relief change a repair chain takes (Note [Repair chains] in local_search.cpp), among the
// `scores` of its candidates over `at`, a plan that does not fit: the best that fits (better()),
// else the one that costs the least time without a memory limit (Evaluation::unlimited_ns) per
// byte of excess it removes, ties to the least excess; scores.size() when none fits or removes
// any excess.
std::size_t cheapest_relief(const Evaluation& at, const std::vector<Evaluation>& scores);

class LocalSearch {
 public:
  // Improves on `result` (its plan and evaluation: the best seed's), counting rounds there; every
  // reference must outlive the LocalSearch.
  // `good_enough_ns`: a step at which the search stops (the lower bound within the gap, Note [Plan
  // search], stopping within the gap); none: it runs to convergence or a limit.
  LocalSearch(const sim::Workload& workload, const sim::Machine& machine, const NetworkView& view,
              const SearchOptions& options, int threads, const Stop& stop, Reporter& report,
              SearchResult& result, std::optional<sim::Nanoseconds> good_enough_ns = std::nullopt);

  // Searches from each seed in turn (Note [Plan search], restarts), then kicks the best plan in
  // passes (Note [Kicks], Note [Passes] in local_search.cpp); returns false when a limit, not
  // convergence, ended it.
  bool run(const std::vector<Seed>& seeds);
  // Plans evaluated or simulated by the rounds.
  [[nodiscard]] std::size_t evaluated() const { return driver_.count() + evaluated_in_rounds_; }
  // The best plan so far fits at good_enough_ns or faster.
  [[nodiscard]] bool within_gap() const;

 private:
  // The neighbourhood a round evaluates, widened after each idle round (Note [Plan search]).
  enum class Sweep { kSampled, kSingles, kPairs, kTriples, kRandomPairs };
  struct Scored {
    std::size_t best;  // moves.size() when none improves
    std::vector<Evaluation> scores;
    bool swept;  // every chunk was evaluated (no limit cut the sweep short)
  };

  [[nodiscard]] bool out_of_limits() const;
  // The local searches from the starts; false when a limit ended them.
  bool search_starts(const std::vector<Seed>& seeds);
  // One pass of kicks (Note [Passes]), its draws' indices from first_index; false when a limit
  // ended it.
  bool kick(std::uint64_t first_index);
  bool improve(sim::Plan plan, Evaluation evaluation, std::uint64_t start_index);
  // The moves of a round; `first_stage`: how many of them are evaluated first (0: all alike).
  std::vector<Move> round_moves(const sim::Plan& plan, const std::vector<Change>& changes,
                                Sweep sweep, std::mt19937_64& rng, std::size_t& first_stage);
  // How evaluate_moves answers: every candidate in full (a kick, which goes on from its plan), or
  // one that cannot beat the incumbent by its times alone (Evaluator::cost with a bar).
  enum class Answers { kFull, kImprovements };
  // The moves' scores over `plan`, and the best improving one: the first `first_stage` first,
  // the others only where none of those improves.
  Scored evaluate_moves(const sim::Plan& plan, const Evaluation& evaluation,
                        const std::vector<Move>& moves, std::size_t first_stage = 0,
                        Answers answers = Answers::kImprovements);
  bool widen(Sweep& sweep, const std::vector<Change>& changes, std::size_t& idle_random_pairs);
  // Note [Combined improvements]: the best of the round's best move (moves[best]) and the sums
  // of its improving moves over `evaluation`, the incumbent's; with its evaluation.
  std::pair<sim::Plan, Evaluation> combine(const sim::Plan& plan, const Evaluation& evaluation,
                                           const std::vector<Move>& moves,
                                           const std::vector<Evaluation>& scores, std::size_t best);
  // Note [Kicks]: changes to kKickChanges variables of `plan`, drawn by blame.
  Move kick_move(const sim::Plan& plan, std::mt19937_64& rng);
  // Note [Repair chains]: a plan better than `evaluation` (which fits) made from one of `moves`
  // that does not fit but would run faster, and changes that free memory where it ran out.
  // Never from a move that is tabu().
  std::optional<std::pair<sim::Plan, Evaluation>> repair(const sim::Plan& plan,
                                                         const Evaluation& evaluation,
                                                         const std::vector<Move>& moves,
                                                         const std::vector<Evaluation>& scores);
  // Note [Repair chains]: a chain from `move` failed lately.
  bool tabu(const Move& move);
  // The changes of `plan` that take a map off the device at the op where `at` ran out (or hold
  // a prefetch back past it), none to the variables of `fixed`, one per map and action; the maps
  // that alone make up `at`'s excess first, smallest first, then the largest; at most
  // kRepairWidth.
  [[nodiscard]] std::vector<Move> relief_moves(const sim::Plan& plan, const Evaluation& at,
                                               const Move& fixed) const;
  // Note [Repair chains]: the first change of each map and action of `plan`, none to the
  // variables of `fixed`, the largest maps first; at most kPlacementWidth.
  [[nodiscard]] std::vector<Move> placement_moves(const sim::Plan& plan, const Move& fixed) const;

  const sim::Workload& workload_;
  const sim::Machine& machine_;
  const NetworkView& view_;
  const SearchOptions& options_;
  const Stop& stop_;
  Reporter& report_;
  SearchResult& result_;
  tbb::task_arena arena_;
  Evaluator driver_;
  tbb::enumerable_thread_specific<std::unique_ptr<Evaluator>> evaluators_;
  const Neighbourhood neighbourhood_;
  const std::size_t batch_;
  std::size_t evaluated_in_rounds_ = 0;
  // The first change of each repair chain that failed, with the round count then.
  std::vector<std::pair<Change, std::size_t>> failed_repairs_;
  // A search of this pass settled on sampled pairs, not on a full sweep (Note [Passes]).
  bool sampled_settle_ = false;
  std::optional<sim::Nanoseconds> good_enough_ns_;
};

}  // namespace memplan::search::engine
