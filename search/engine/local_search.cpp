#include "search/engine/local_search.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

#include "search/parallel.hpp"

namespace memplan::search::engine {
namespace {

constexpr std::size_t kBatchPerThread = 48;
constexpr std::size_t kDeterministicBatch = 96;
// An idle round after a round of sampled singles evaluates every single change, up to this many;
// after that every pair of changes to two variables, then every triple, up to these many.
constexpr std::size_t kFullSweepCap = 20000;
constexpr double kPairSweepCap = 60000;
constexpr double kTripleSweepCap = 150000;
// Sweeps are evaluated in chunks of this many moves (Note [Plan search], rounds).
constexpr std::size_t kSweepChunk = 4096;
// Idle rounds of sampled pairs before a search whose pairs are too many to sweep settles.
constexpr std::size_t kRandomPairRounds = 2;
// Local searches from this many of the best seeds (Note [Plan search], restarts).
constexpr std::size_t kStarts = 3;

// The score of a candidate the plan rules refuse (sim::lossy_map_recomputed_from): it never
// beats anything.
Evaluation refused() {
  Evaluation e;
  e.oom_bytes_missing = std::numeric_limits<sim::Bytes>::max();
  return e;
}

}  // namespace

LocalSearch::LocalSearch(const sim::Workload& workload, const sim::Machine& machine,
                         const NetworkView& view, const SearchOptions& options, int threads,
                         const Stop& stop, Reporter& report, SearchResult& result,
                         std::optional<sim::Nanoseconds> good_enough_ns)
    : workload_(workload),
      view_(view),
      options_(options),
      stop_(stop),
      report_(report),
      result_(result),
      arena_(arena_concurrency(threads)),
      driver_(workload, machine, options.collective_ready_ns),
      evaluators_([&] {
        auto evaluator =
            std::make_unique<Evaluator>(workload, machine, options.collective_ready_ns);
        evaluator->measure_excess(true);
        evaluator->measure_step(true);
        return evaluator;
      }),
      neighbourhood_(view, options.encodings, options.host_placement, options.release_points),
      batch_(options.deterministic ? kDeterministicBatch
                                   : kBatchPerThread * static_cast<std::size_t>(threads)),
      good_enough_ns_(good_enough_ns) {}

// Searches from each seed in turn; returns false when a limit, not convergence, ended it.
bool LocalSearch::run(const std::vector<Seed>& seeds) {
  bool converged = true;
  std::size_t starts = 0;
  for (std::size_t k = 0; k < seeds.size() && starts < kStarts; ++k) {
    // Restarts from seeds that fit; while nothing fits, from the next seeds too (fit first).
    if (k > 0 && !seeds[k].evaluation.feasible && result_.evaluation.feasible) break;
    if (k > 0 && out_of_limits()) return false;
    if (!improve(seeds[k].plan, seeds[k].evaluation, k)) converged = false;
    ++starts;
  }
  return converged;
}

bool LocalSearch::out_of_limits() const {
  return stop_.due() || (options_.max_rounds != 0 && result_.rounds >= options_.max_rounds) ||
         within_gap();
}

bool LocalSearch::within_gap() const {
  return good_enough_ns_ && result_.evaluation.feasible &&
         result_.evaluation.step_ns <= *good_enough_ns_;
}

// Local search from one seed until it settles (true) or a limit stops it (false).
bool LocalSearch::improve(sim::Plan plan, Evaluation evaluation, std::uint64_t start_index) {
  Sweep sweep = Sweep::kSampled;
  std::size_t idle_random_pairs = 0;
  std::size_t round = 0;
  while (!out_of_limits()) {
    ++result_.rounds;
    ++round;
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + start_index * 0x100000001B3ULL +
                        round);
    const std::vector<Change> changes = neighbourhood_.changes(plan);
    const std::vector<Move> moves = round_moves(plan, changes, sweep, rng);
    if (moves.empty()) return true;
    const auto [best, scores, swept] = evaluate_moves(plan, evaluation, moves);
    bool settled = false;
    if (best < moves.size()) {
      plan = with_move(plan, moves[best], neighbourhood_);
      evaluation = scores[best];
      sweep = Sweep::kSampled;
      idle_random_pairs = 0;
    } else if (swept) {
      settled = widen(sweep, changes, idle_random_pairs);
    }
    if (better(evaluation, result_.evaluation)) {
      result_.plan = plan;
      result_.evaluation = evaluation;
    }
    report_("round", "", result_.rounds, evaluated(), result_.evaluation);
    if (settled) return true;
  }
  return false;
}

std::vector<Move> LocalSearch::round_moves(const sim::Plan& plan,
                                           const std::vector<Change>& changes, Sweep sweep,
                                           std::mt19937_64& rng) {
  std::vector<Move> moves;
  switch (sweep) {
    case Sweep::kSampled:
    case Sweep::kRandomPairs:
      moves = draw(changes, blame(driver_.timeline(plan), view_, neighbourhood_, plan), batch_,
                   sweep == Sweep::kRandomPairs, rng);
      break;
    case Sweep::kSingles:
      for (const Change& c : changes) moves.push_back({c});
      break;
    case Sweep::kPairs:
      moves = combinations(changes, 2);
      break;
    case Sweep::kTriples:
      moves = combinations(changes, 3);
      break;
  }
  return moves;
}

// Evaluated in chunks (a fixed size, so any thread count sees the same chunks); the best
// candidate of the first chunk that holds an improvement is taken.
LocalSearch::Scored LocalSearch::evaluate_moves(const sim::Plan& plan, const Evaluation& evaluation,
                                                const std::vector<Move>& moves) {
  Scored out{moves.size(), std::vector<Evaluation>(moves.size()), true};
  for (std::size_t begin = 0; begin < moves.size() && out.best == moves.size();
       begin += kSweepChunk) {
    if (begin > 0 && stop_.due()) {
      out.swept = false;
      break;
    }
    const std::size_t end = std::min(moves.size(), begin + kSweepChunk);
    std::atomic<bool> cut{false};
    arena_.execute([&] {
      parallel_each(begin, end, [&](std::size_t i) {
        if (stop_.due()) {  // a chunk of a sweep can take seconds on a deep network
          out.scores[i] = refused();
          cut.store(true, std::memory_order_relaxed);
          return;
        }
        const sim::Plan candidate = with_move(plan, moves[i], neighbourhood_);
        out.scores[i] = sim::lossy_map_recomputed_from(candidate, view_.feature_maps(), workload_)
                            ? refused()
                            : evaluators_.local()->cost(candidate);
      });
    });
    evaluated_in_rounds_ += end - begin;
    if (cut.load()) out.swept = false;
    for (std::size_t i = begin; i < end; ++i) {
      if (better(out.scores[i], out.best == moves.size() ? evaluation : out.scores[out.best]))
        out.best = i;
    }
  }
  return out;
}

// Nothing in this round's neighbourhood improved: the next round's (Note [Plan search],
// widening). Returns true when the search has settled.
bool LocalSearch::widen(Sweep& sweep, const std::vector<Change>& changes,
                        std::size_t& idle_random_pairs) {
  const bool singles_done =
      sweep == Sweep::kSingles || (sweep == Sweep::kSampled && changes.size() <= batch_);
  if (sweep == Sweep::kSampled && !singles_done) {
    sweep = changes.size() <= kFullSweepCap ? Sweep::kSingles : Sweep::kRandomPairs;
  } else if (singles_done) {
    sweep = combination_count(changes, 2) <= kPairSweepCap ? Sweep::kPairs : Sweep::kRandomPairs;
  } else if (sweep == Sweep::kPairs && combination_count(changes, 3) <= kTripleSweepCap) {
    sweep = Sweep::kTriples;
  } else if (sweep != Sweep::kRandomPairs || ++idle_random_pairs == kRandomPairRounds) {
    return true;  // every pair (or triple) swept, or the sampled pairs ran out of luck
  }
  return false;
}

}  // namespace memplan::search::engine
