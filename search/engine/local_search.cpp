#include "search/engine/local_search.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <tuple>
#include <utility>

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
// Note [Passes]: the offset of a pass's draws.
constexpr std::uint64_t kPassStride = std::uint64_t{1} << 32;
// Note [Hopeless restarts]: a restart still this much slower than the best plan after this many
// rounds gives way.
constexpr std::size_t kRestartCheck = 10;
constexpr double kHopeless = 1.5;
// Note [Kicks]: changes a kick makes, and kicks in a row without a better plan that settle.
constexpr std::size_t kKickChanges = 6;
constexpr std::size_t kIdleKicks = 4;
// Note [Repair chains]: chains per idle round, changes a chain adds at most, and the relief
// changes evaluated at each of its steps.
constexpr std::size_t kRepairChains = 4;
constexpr std::size_t kRepairDepth = 8;
constexpr std::size_t kRepairWidth = 12;
// Note [Repair chains]: the changes tried at a step where none frees bytes at the op.
constexpr std::size_t kPlacementWidth = 48;
// Note [Combined improvements]: the combinations of a round's improving moves evaluated, at most.
constexpr std::size_t kCombined = 8;
// Note [Repair chains]: a chain that failed is not started again for this many rounds.
constexpr std::size_t kRepairTabuRounds = 24;
// Note [Moves the stalls ask for]: the swapped maps whose stalls a round's moves answer.
constexpr std::size_t kStallMaps = 4;

// The score of a candidate the plan rules refuse (sim::lossy_map_recomputed_from,
// sim::host_update_problem): it never beats anything.
Evaluation refused() {
  Evaluation e;
  e.oom_bytes_missing = std::numeric_limits<sim::Bytes>::max();
  return e;
}

bool was_refused(const Evaluation& e) {
  return e.oom_bytes_missing == std::numeric_limits<sim::Bytes>::max();
}

// Note [Repair chains]: (bytes of its map, index) of the first change of each map and action
// among `changes` that `takes`, none to a variable of `fixed` (a chain changes each once).
template <class Takes>
std::vector<std::pair<sim::Bytes, std::size_t>> first_of_each_action(
    const std::vector<Change>& changes, const Move& fixed, const NetworkView& view, Takes takes) {
  std::vector<std::pair<sim::Bytes, std::size_t>> ranked;
  for (std::size_t k = 0; k < changes.size(); ++k) {
    const Change& c = changes[k];
    if (c.map < 0 || std::any_of(fixed.begin(), fixed.end(),
                                 [&](const Change& f) { return f.variable == c.variable; }))
      continue;
    if (!ranked.empty()) {  // another prefetch or release point of the same action
      const Change& last = changes[ranked.back().second];
      if (last.map == c.map && last.action == c.action && last.encoding == c.encoding) continue;
    }
    if (takes(c)) ranked.emplace_back(view.map_bytes(c.map), k);
  }
  return ranked;
}

}  // namespace

std::size_t cheapest_relief(const Evaluation& at, const std::vector<Evaluation>& scores) {
  const std::size_t none = scores.size();
  std::size_t fits = none;
  std::size_t pick = none;
  double pick_cost = 0.0;
  for (std::size_t k = 0; k < none; ++k) {
    const Evaluation& e = scores[k];
    if (e.feasible) {
      if (fits == none || better(e, scores[fits])) fits = k;
      continue;
    }
    if (e.excess_bytes <= 0 || e.excess_bytes >= at.excess_bytes || e.unlimited_ns <= 0) continue;
    const double slower =
        static_cast<double>(std::max<sim::Nanoseconds>(0, e.unlimited_ns - at.unlimited_ns));
    const double cost = slower / static_cast<double>(at.excess_bytes - e.excess_bytes);
    if (pick == none || cost < pick_cost ||
        (cost == pick_cost && e.excess_bytes < scores[pick].excess_bytes)) {
      pick = k;
      pick_cost = cost;
    }
  }
  return fits != none ? fits : pick;
}

LocalSearch::LocalSearch(const sim::Workload& workload, const sim::Machine& machine,
                         const NetworkView& view, const SearchOptions& options, int threads,
                         const Stop& stop, Reporter& report, SearchResult& result,
                         std::optional<sim::Nanoseconds> good_enough_ns)
    : workload_(workload),
      machine_(machine),
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

// Searches from each seed in turn, then kicks the best plan, in passes (Note [Kicks], Note
// [Passes]); returns false when a limit, not convergence, ended it.
bool LocalSearch::run(const std::vector<Seed>& seeds) {
  ++result_.passes;
  if (!search_starts(seeds) || !kick(0)) return false;
  const std::size_t passes = options_.kicks ? std::max<std::size_t>(options_.max_passes, 1) : 1;
  for (std::size_t pass = 1; pass < passes && sampled_settle_; ++pass) {
    if (out_of_limits()) return false;
    sampled_settle_ = false;
    ++result_.passes;
    if (!kick(pass * kPassStride)) return false;
  }
  return true;
}

// Local searches from the best seeds (Note [Plan search], restarts); false when a limit ended
// them.
bool LocalSearch::search_starts(const std::vector<Seed>& seeds) {
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

// Note [Passes]
// ~~~~~~~~~~~~~
// A pass is a series of kicks from the best plan (Note [Kicks]) until kIdleKicks kicks in a row
// find nothing better; the first follows the searches from the starts. Where it settles with time
// left, and some search of the pass settled on sampled pairs (a network too large to sweep every
// pair: Note [Plan search], widening), the time goes to another pass, whose kicks draw from other
// streams of the seed's generator (their index offset by kPassStride per pass), up to
// SearchOptions::max_passes (8). A search that settled on a full sweep of pairs or triples
// stands where no pair or triple of changes improves; one that settled on sampled pairs may not,
// and another series of kicks is another chance to leave its basin. (Until session 35 a later
// pass first searched from the starts again with other draws. Each of those searches gave way
// after kRestartCheck rounds (Note [Hopeless restarts]), its plan 2 to 4 times the best plan's
// step on MobileNetV2 b128 and the H100 GPT-2 at 25% of their feature-map bytes, where every
// start is far from the best plan: the passes' gains were their kicks'. Let run to settle,
// measured against the first pass's search from the same start instead of the best plan, they
// gave the same mean over seeds 1 to 4 at 60 s, a worse one at 20 s: docs/search.md.) The best
// plan of every pass is the result; the first pass is the search as before, so passes only add.
// Off with the kicks (SearchOptions::kicks).
bool LocalSearch::kick(std::uint64_t first_index) {
  std::size_t idle = 0;
  for (std::uint64_t k = 0; options_.kicks && result_.evaluation.feasible && idle < kIdleKicks;
       ++k) {
    if (out_of_limits()) return false;
    const Evaluation before = result_.evaluation;
    const std::uint64_t index = first_index + kStarts + k;
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + index * 0xC2B2AE3D27D4EB4FULL);
    const Move move = kick_move(result_.plan, rng);
    if (move.empty()) break;
    const Scored scored =
        evaluate_moves(result_.plan, result_.evaluation, {move}, 0, Answers::kFull);
    if (!was_refused(scored.scores.front()) &&
        !improve(with_move(result_.plan, move, neighbourhood_), scored.scores.front(), index))
      return false;
    idle = better(result_.evaluation, before) ? 0 : idle + 1;
  }
  return true;
}

// Note [Hopeless restarts]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A restart from a seed far slower than the best plan so far rarely catches up: ResNet-50 b128 at
// 25% of its feature-map bytes starts from PoocH's plan (694 ms; settled at 615 ms in 22 rounds),
// then from two seeds of 1592 and 1628 ms: the first is at 788 ms after 10 rounds and settles at
// 537 ms, the new best, the second is at 1524 ms after 10 rounds and settles at 1335 ms after 96,
// a fifth of the rounds 20 s hold on a loaded machine, which the kicks then lacked (the row ended
// at 465 ms with them, 517 to 530 ms without). So a search from any start but the first (a
// restart, or a kick, which starts near the best plan and so rarely meets the rule) whose plan
// after kRestartCheck rounds is still over kHopeless times the best plan's step gives way, as a
// settled one does. The rule reads the rounds' plans alone: determinism is kept.
//
// Note [Kicks]
// ~~~~~~~~~~~~
// The local search often settles long before its time limit (ResNet-50 b128 at 25% of its
// feature-map bytes: at 16 s of 60; MobileNetV2 b128 at 25%: at 7 to 11 s of 20, where nothing
// fits to restart from), at a local optimum that depends on the path more than on the moves (the
// same row ends 173 to 235 ms with seeds 1 to 3). So once every start has settled, the time left
// goes to iterated local search: the best plan so far with kKickChanges changes to different
// variables, drawn like a round's moves (weighted by the timeline's blame), is searched from like
// a seed, until it settles; the best plan any of them reaches is the result. kIdleKicks kicks in a
// row that find nothing better settle the pass (Note [Passes]). Kicks are drawn by the driving
// thread from (seed, kick), so determinism is kept.
Move LocalSearch::kick_move(const sim::Plan& plan, std::mt19937_64& rng) {
  const std::vector<Change> changes = neighbourhood_.changes(plan);
  if (changes.empty()) return {};
  const std::vector<double> score = blame(driver_.timeline(plan), view_, neighbourhood_, plan);
  std::vector<double> weights;
  weights.reserve(changes.size());
  for (const Change& c : changes) weights.push_back(score[static_cast<std::size_t>(c.variable)]);
  std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
  Move move;
  for (std::size_t tries = 0; move.size() < kKickChanges && tries < 16 * kKickChanges; ++tries) {
    const Change& c = changes[pick(rng)];
    if (std::none_of(move.begin(), move.end(),
                     [&](const Change& m) { return m.variable == c.variable; }))
      move.push_back(c);
  }
  return move;
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
    std::size_t first_stage = 0;
    const std::vector<Move> moves = round_moves(plan, changes, sweep, rng, first_stage);
    if (moves.empty()) return true;
    const auto [best, scores, swept] = evaluate_moves(plan, evaluation, moves, first_stage);
    bool settled = false;
    if (best < moves.size()) {
      if (options_.compound_moves) {
        std::tie(plan, evaluation) = combine(plan, evaluation, moves, scores, best);
      } else {
        plan = with_move(plan, moves[best], neighbourhood_);
        evaluation = scores[best];
      }
      sweep = Sweep::kSampled;
      idle_random_pairs = 0;
    } else if (auto repaired = options_.compound_moves ? repair(plan, evaluation, moves, scores)
                                                       : std::nullopt) {
      plan = std::move(repaired->first);
      evaluation = repaired->second;
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
    if (settled) {
      sampled_settle_ = sampled_settle_ || sweep == Sweep::kRandomPairs;
      return true;
    }
    // Note [Hopeless restarts]
    if (start_index > 0 && round == kRestartCheck && evaluation.feasible &&
        result_.evaluation.feasible &&
        static_cast<double>(evaluation.step_ns) >
            kHopeless * static_cast<double>(result_.evaluation.step_ns))
      return true;
  }
  return false;
}

std::vector<Move> LocalSearch::round_moves(const sim::Plan& plan,
                                           const std::vector<Change>& changes, Sweep sweep,
                                           std::mt19937_64& rng, std::size_t& first_stage) {
  std::vector<Move> moves;
  switch (sweep) {
    case Sweep::kSampled:
    case Sweep::kRandomPairs: {
      const sim::Timeline timeline = driver_.timeline(plan);
      moves = draw(changes, blame(timeline, view_, neighbourhood_, plan), batch_,
                   sweep == Sweep::kRandomPairs, rng);
      // Note [Moves the stalls ask for]: after the drawn ones (ties go to the batch's first).
      if (sweep == Sweep::kSampled) {
        for (Move& m : neighbourhood_.stall_moves(plan, timeline, kStallMaps))
          moves.push_back(std::move(m));
      }
      break;
    }
    case Sweep::kSingles:
      for (const Change& c : changes) moves.push_back({c});
      // Note [Sibling moves] in neighbourhood.cpp: after every single change; Note [Timed
      // swaps] there: evaluated only where none of those improves.
      for (Move& m : neighbourhood_.sibling_moves(plan, moves)) moves.push_back(std::move(m));
      first_stage = moves.size();
      for (Move& m : neighbourhood_.timed_swaps(plan, moves, machine_))
        moves.push_back(std::move(m));
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

// Evaluated in chunks (a fixed size, so any thread count sees the same chunks; the first
// `first_stage` moves end a chunk of their own); the best candidate of the first chunk that holds
// an improvement is taken.
LocalSearch::Scored LocalSearch::evaluate_moves(const sim::Plan& plan, const Evaluation& evaluation,
                                                const std::vector<Move>& moves,
                                                std::size_t first_stage, Answers answers) {
  Scored out{moves.size(), std::vector<Evaluation>(moves.size()), true};
  for (std::size_t begin = 0, end = 0; begin < moves.size() && out.best == moves.size();
       begin = end) {
    if (begin > 0 && stop_.due()) {
      out.swept = false;
      break;
    }
    end = std::min(moves.size(), begin + kSweepChunk);
    if (begin < first_stage) end = std::min(end, first_stage);
    std::atomic<bool> cut{false};
    arena_.execute([&] {
      parallel_each(begin, end, [&](std::size_t i) {
        if (stop_.due()) {  // a chunk of a sweep can take seconds on a deep network
          out.scores[i] = refused();
          cut.store(true, std::memory_order_relaxed);
          return;
        }
        const sim::Plan candidate = with_move(plan, moves[i], neighbourhood_);
        // Each move is valid alone, but a sum of moves may not be (Note [Combined improvements]:
        // one brings an optimizer state to the device, another moves the update to the host,
        // which must then read it there), nor may a random pair.
        const bool invalid =
            sim::lossy_map_recomputed_from(candidate, view_.feature_maps(), workload_) ||
            !sim::host_update_problem(candidate, workload_).empty();
        // Answering for improvements, a candidate matters only if it beats `evaluation` or,
        // not fitting, would run faster (Note [Repair chains]): the others are weighed by
        // their times alone.
        Evaluator& evaluator = *evaluators_.local();
        out.scores[i] = invalid                     ? refused()
                        : answers == Answers::kFull ? evaluator.cost(candidate)
                                                    : evaluator.cost(candidate, evaluation);
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

// Note [Moves the stalls ask for]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A swapped map's copies stall the step in two places: where its device copy is released, when
// the copy-out has not finished (compute waits for it to reuse the memory), and where it is first
// used in backward, when the copy-in has not. The neighbourhood moves a release point by 1, 4 or
// 16 ops and a prefetch by 1 to 64, and a large map needs other distances (MobileNetV2 b128 at 25%
// of its feature-map bytes: a 616 MB map whose 38 ms copies cost 29 ms of copy-out and 23 ms of
// copy-in stalls, of a 173 ms step). So each sampled round adds, for the kStallMaps swapped maps
// whose copies stalled the incumbent's timeline the longest, the release point moved later, or
// the prefetch moved earlier, by the stall's length in the ops' own time and by half of it
// (Neighbourhood::stall_moves): the point where the copy would have been done. Such a move often
// holds memory the plan does not have; it is then a candidate for the repair chains (Note [Repair
// chains]), which free memory elsewhere. The moves come from the incumbent's timeline, which the
// driving thread simulates: determinism is kept.
//
// Note [Combined improvements]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A round often holds several improving moves to different variables (early on, one per map that
// a cheaper action suits): taking only the best, the search needs a round per change, hundreds on
// a network of hundreds of maps, more than a time limit of seconds allows on a loaded machine.
// So the round's improving moves, best first (better(), ties in batch order), are added up one
// after another, skipping any that touches a variable already changed, and each of the first
// kCombined sums of two or more is evaluated (in parallel, as a chunk); the best of them is the
// round's move when it beats the best single move, else that move is. Every candidate is still
// simulated and only a better plan is taken, so the search stays a descent; the sums are built by
// the driving thread from the round's scores, so determinism is kept.
std::pair<sim::Plan, Evaluation> LocalSearch::combine(const sim::Plan& plan,
                                                      const Evaluation& evaluation,
                                                      const std::vector<Move>& moves,
                                                      const std::vector<Evaluation>& scores,
                                                      std::size_t best) {
  std::vector<std::size_t> improving{best};
  for (std::size_t i = 0; i < moves.size(); ++i) {
    if (i != best && better(scores[i], evaluation)) improving.push_back(i);
  }
  std::stable_sort(improving.begin() + 1, improving.end(),
                   [&](std::size_t a, std::size_t b) { return better(scores[a], scores[b]); });
  std::vector<Move> sums;
  Move sum;
  std::vector<int> used;
  for (std::size_t i : improving) {
    if (std::any_of(moves[i].begin(), moves[i].end(), [&](const Change& c) {
          return std::find(used.begin(), used.end(), c.variable) != used.end();
        }))
      continue;
    for (const Change& c : moves[i]) {
      sum.push_back(c);
      used.push_back(c.variable);
    }
    if (i != best) sums.push_back(sum);
    if (sums.size() == kCombined) break;
  }
  if (!sums.empty()) {
    const Scored scored = evaluate_moves(plan, scores[best], sums);
    if (scored.best < sums.size())
      return {with_move(plan, sums[scored.best], neighbourhood_), scored.scores[scored.best]};
  }
  return {with_move(plan, moves[best], neighbourhood_), scores[best]};
}

// Note [Repair chains]
// ~~~~~~~~~~~~~~~~~~~~~
// Under a tight budget the local search's optimum is often a plan where every faster single
// change runs out of memory: keeping a swapped map whose copies stall the step, or swapping a map
// whose recomputation stalls it, needs memory that only other maps' changes free (MobileNetV2
// b128 at 25% of its feature-map bytes: a 147 MiB map swapped with 26 ms of copy stalls). Such a
// pair or triple is one among millions, which sampled pairs rarely meet. A round that improves
// nothing therefore looks at its own candidates that did not fit but would have run faster than
// the incumbent without a memory limit (Evaluation::unlimited_ns: memory never changes timing),
// the kRepairChains fastest of different variables (a sampled batch may hold a move more than
// once, and a swap's prefetch points, each a move, often run alike: MobileNetV2 at 25% spent every
// chain of most idle rounds on one map's prefetches), and repairs each greedily. At the op where
// its memory ran out, the changes that take a map off the device there (a kept map swapped,
// recomputed or encoded over its absence; a swapped map prefetched later or recomputed; never a
// variable of the move being repaired), the first of each map and action, are ranked best fit
// first: the maps that alone make up the excess, smallest first, then the others, largest first;
// the first kRepairWidth are tried. The one added is the fastest that fits, else the one that
// costs the least time without a limit per byte of excess it removes (a knapsack's greedy: the
// largest map freed the most but was often the dearest, and the chain ended slower than the
// incumbent); up to kRepairDepth changes. Where none of those gets it closer to fitting, the
// arena's holes may be what is short, not the bytes (AlexNet b64 at 90% of its feature-map
// bytes, maps only: the fastest algorithm of `features.3_bwd` needs a 284.77 MiB workspace where
// 335 MiB are free, the largest block 235.89 MiB, and both maps away-able there already are), so
// the step tries the first change of each other map and action instead, the largest maps first,
// up to kPlacementWidth: most free no byte at the op but move where blocks are placed before it
// (there, two maps kept instead of swapped, dead by that op, make the workspace fit: vDNN's plan
// of 30.83 ms, where the search settled from two seeds of four, becomes 27.78 ms from every
// seed). Evaluation::excess_bytes is the arena's top, so the same rule picks among them. A
// chain stops when no change gets it closer to fitting,
// when its plan without a limit is no longer faster than the incumbent, or when it fits; a chain
// that fits faster than the incumbent is the round's move (the first of the chains, in the order
// they were ranked, that does). A chain that does not is not started again from the same change
// for kRepairTabuRounds rounds: from an unchanged incumbent (an idle round after an idle round)
// it fails again change for change, and its place goes to the next candidate. So the search
// still only ever accepts an improvement, and everything is generated by the driving thread from
// the round's scores and its count of rounds, which do not depend on scheduling: determinism is
// kept.
std::optional<std::pair<sim::Plan, Evaluation>> LocalSearch::repair(
    const sim::Plan& plan, const Evaluation& evaluation, const std::vector<Move>& moves,
    const std::vector<Evaluation>& scores) {
  if (!evaluation.feasible) return std::nullopt;
  std::vector<std::size_t> promising;
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const Evaluation& e = scores[i];
    if (!e.feasible && e.excess_bytes > 0 && e.oom_op != sim::kNoOp && e.unlimited_ns > 0 &&
        e.unlimited_ns < evaluation.iteration_ns && !tabu(moves[i]))
      promising.push_back(i);
  }
  std::stable_sort(promising.begin(), promising.end(), [&](std::size_t a, std::size_t b) {
    return scores[a].unlimited_ns < scores[b].unlimited_ns;
  });
  // One chain per variable (Note [Repair chains]).
  std::vector<int> seen;
  std::erase_if(promising, [&](std::size_t i) {
    const int variable = moves[i].front().variable;
    if (std::find(seen.begin(), seen.end(), variable) != seen.end()) return true;
    seen.push_back(variable);
    return false;
  });
  if (promising.size() > kRepairChains) promising.resize(kRepairChains);
  for (std::size_t i : promising) {
    sim::Plan chain = with_move(plan, moves[i], neighbourhood_);
    Evaluation at = scores[i];
    Move fixed = moves[i];
    for (std::size_t depth = 0; depth < kRepairDepth && !stop_.due(); ++depth) {
      std::vector<Move> relief = relief_moves(chain, at, fixed);
      Scored scored = evaluate_moves(chain, at, relief);
      std::size_t pick = cheapest_relief(at, scored.scores);
      if (pick == relief.size()) {  // nothing frees bytes there: the arena's holes (below)
        relief = placement_moves(chain, fixed);
        scored = evaluate_moves(chain, at, relief);
        pick = cheapest_relief(at, scored.scores);
      }
      if (pick == relief.size()) break;  // nothing gets it closer to fitting
      chain = with_move(chain, relief[pick], neighbourhood_);
      at = scored.scores[pick];
      fixed.push_back(relief[pick].front());
      if (at.feasible) {
        if (better(at, evaluation)) return std::pair(std::move(chain), at);
        break;
      }
      if (at.unlimited_ns >= evaluation.iteration_ns) break;
    }
    failed_repairs_.emplace_back(moves[i].front(), result_.rounds);
  }
  return std::nullopt;
}

// A chain from this move failed in the last kRepairTabuRounds rounds (Note [Repair chains]);
// older failures are forgotten.
bool LocalSearch::tabu(const Move& move) {
  std::erase_if(failed_repairs_,
                [&](const auto& f) { return f.second + kRepairTabuRounds <= result_.rounds; });
  return std::any_of(failed_repairs_.begin(), failed_repairs_.end(),
                     [&](const auto& f) { return f.first == move.front(); });
}

std::vector<Move> LocalSearch::placement_moves(const sim::Plan& plan, const Move& fixed) const {
  const std::vector<Change> changes = neighbourhood_.changes(plan);
  auto ranked = first_of_each_action(changes, fixed, view_, [](const Change&) { return true; });
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Move> out;
  for (std::size_t j = 0; j < ranked.size() && out.size() < kPlacementWidth; ++j)
    out.push_back({changes[ranked[j].second]});
  return out;
}

std::vector<Move> LocalSearch::relief_moves(const sim::Plan& plan, const Evaluation& at,
                                            const Move& fixed) const {
  if (at.oom_op == sim::kNoOp) return {};
  const sim::OpId op = at.oom_op;
  const std::vector<Change> changes = neighbourhood_.changes(plan);
  // (bytes, index in changes): the first relieving change of each map and action.
  auto ranked = first_of_each_action(changes, fixed, view_, [&](const Change& c) {
    const auto m = static_cast<std::size_t>(c.map);
    const sim::Decision& d = plan.decisions[m];
    const sim::FeatureMap& fm = view_.feature_maps()[m];
    const sim::OpId last_forward =
        fm.forward_uses.empty() ? view_.producer(c.map) : fm.forward_uses.back();
    const sim::OpId first_backward = fm.backward_uses.front();
    if (op <= last_forward || op >= first_backward) return false;  // needed on the device at `op`
    // A swap's prefetch: the change's point, or the default; the map is back from there on.
    const sim::OpId prefetch = c.prefetch_before != sim::kNoOp
                                   ? c.prefetch_before
                                   : sim::default_prefetch_point(fm, workload_);
    const bool away = c.action != sim::Action::kSwap || prefetch > op;
    if (d.action == sim::Action::kKeep) return away;
    if (d.action != sim::Action::kSwap) return false;
    // Back on the device at `op` now: its prefetch is issued at or before it.
    const sim::OpId current = d.prefetch_before != sim::kNoOp
                                  ? d.prefetch_before
                                  : sim::default_prefetch_point(fm, workload_);
    return current <= op && away && c.action != sim::Action::kKeep &&
           (c.action != sim::Action::kSwap || c.release_before == d.release_before);
  });
  // Best fit: the maps that alone make up the excess, smallest first, then the others, largest
  // first.
  const sim::Bytes excess = at.excess_bytes;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    const bool a_covers = a.first >= excess;
    const bool b_covers = b.first >= excess;
    if (a_covers != b_covers) return a_covers;
    return a_covers ? a.first < b.first : a.first > b.first;
  });
  std::vector<Move> out;
  for (std::size_t j = 0; j < ranked.size() && out.size() < kRepairWidth; ++j)
    out.push_back({changes[ranked[j].second]});
  return out;
}

}  // namespace memplan::search::engine
