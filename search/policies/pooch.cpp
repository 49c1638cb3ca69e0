// PoocH (Ito et al., 2019): profiling-based keep / swap / recompute classification.
//
// Note [PoocH in memplan]
// The profile PoocH measures on the GPU (per-op compute time, per-map swap times, when each swap
// ran) is what the simulator predicts, so "profile" here means "simulate":
// 1. Simulate all-swap. L_O = maps whose swap-out is not hidden by compute (the compute stream
//    waited for its copy-out), L_I = maps whose swap-in is not hidden (compute waited for it).
//    Maps in neither stay swapped.
// 2. Enumerate keep/swap for every map of L_I (a binary tree); at each leaf scan L_O \ L_I from
//    the output layer backwards, turning swap into keep while the plan fits; keep the fastest
//    feasible leaf. The all-keep leaf is tried first: when it fits no other leaf can be faster
//    (keeping a map removes its copies and the waits on them, and adds no instruction). A scan
//    first tries keeping its whole list at once (one simulation when memory has room).
//    DEPARTURE from the paper, which enumerates the whole tree: memplan enumerates at most
//    PoochLimits::max_enumerated = 8 maps of L_I (those with the longest swap-in stalls; 256
//    leaves), fewer when 2^k * (1 + |L_O \ L_I|) would exceed PoochLimits::leaf_simulations =
//    4096 simulations. Why: with swap-ins one op ahead nearly every swap-in of memplan's all-swap
//    profile was exposed (|L_I| 185-208 of ResNet-50's 212 maps, 412 of ResNeXt-101 3D's 416),
//    and where the link is slow it still can be with PoocH's swap-in scheduling (Note [PoocH's
//    swap-in scheduling]; the imported ResNet-50 step: |L_I| 1 on NVLink 2, 13 on PCIe 3); the
//    full tree (2^|L_I| leaves) could not be walked then. The maps of L_I beyond the
//    enumerated ones are scanned like L_O \ L_I on the best leaf (from the output layer backwards,
//    swap -> keep while the plan fits). That is not the full tree's answer in general (the greedy
//    scan can keep a map whose memory, left to two others, would have saved more time).
//    tests/search/policies/pooch_test.cpp checks that on a small instance the bounded tree, with 0,
//    1 or all of L_I enumerated, gives the full tree's classification, and that on random small
//    fans the shortcuts above lose nothing against the plain tree. pooch_keep_swap() takes the
//    limits so that a caller can enumerate more.
// 3. For the maps still swapped, r(X) = recompute_overhead(X) / swap_overhead(X), where an
//    overhead is the iteration time with X so treated minus the time with X kept on a device with
//    unlimited memory, the other maps fixed. Maps with r >= 1 stay swapped; the one with the
//    smallest r < 1 whose recomputation fits becomes recompute; repeat until none is left.
//    The paper recomputes every r after each choice (O(|L|^2) simulations: 83 s of CPU on
//    ResNeXt-101 3D at batch 96). Here the choice is lazy, as in lazy greedy for submodular
//    objectives: all r are computed once (in parallel); then the smallest cached r is
//    re-measured against the current plan, and taken if it is still < 1 and no larger than the
//    next cached r, or put back with its new value. When no cached r < 1 is left, every swapped
//    map is re-measured once more and the loop goes on if any r < 1 appeared, so it stops on the
//    paper's condition (no swapped map with r < 1 whose recomputation fits).
//    A full pass measures only the swapped maps that the current plan's timeline makes
//    candidates: the compute stream waited for their copies, for at least as long as re-running
//    their producer takes (a swap whose copies are hidden has r = infinity; one whose stalls are
//    shorter than its recompute has r > 1 unless its copies delay other maps' copies on the
//    link). APPROXIMATION: a map whose swap costs time only through such delays, with no stall of
//    its own, is not measured, where the paper's loop would measure it; in exchange a pass costs
//    one simulation plus two per candidate instead of two per swapped map (ResNet-1517: 6,080).
//    When a pass has more than kMeasuredCandidates candidates (ResNet-1517 b16: 4,071), even
//    that is quadratic, and r is estimated instead: the stalls on the map's copies in the
//    current timeline stand for its swap overhead, its producer's time for its recompute
//    overhead. Maps are taken smallest estimate first, in runs that double while the run makes
//    the plan faster (which is what r < 1 means: recomputing costs less than the swap) and halve
//    when it does not; a map that alone does not make the plan faster stays swapped, and 32 such
//    refusals in a row end the step. APPROXIMATION (large networks only): the order is the
//    estimate's, not the measured r's, and the step ends on refusals rather than on a full pass.
//
// The keep scans (step 2: L_O \ L_I on each leaf, the rest of L_I on the best leaf) try runs of
// maps at once, doubling the run while the plan fits and halving it when it does not, so a scan
// costs about one simulation per refused map plus a logarithm per kept run instead of one per
// map; that is the one-at-a-time scan whenever keeping fewer maps never needs more memory. A map
// at least as large as one refused earlier in the scan, and away from the device (between its
// last forward use and its prefetch) across the op where that one ran out, is refused without a
// simulation (APPROXIMATION: the refused map's bytes at that op are what it lacked; a larger map
// away across it lacks at least as much, up to the arena's fragmentation). A scan of more than
// kLongScan maps ends after kRefusalsInARow refusals in a row; the maps after them stay swapped
// (APPROXIMATION, large networks only). Why: near the device's capacity the arena's placement
// decides, not the bytes. On ResNet-1517 b16 in 8 GiB nearly every trial keeping one more map
// runs out in the update phase, 35 MiB short of a hole with 90 MiB free in all (keeping a 32 KiB
// map moves where every later block goes), and the 5,349 maps of the two scans cost 2,955
// checks for 131 kept runs, some after 136 refusals. Ended this way the scans keep fewer small
// maps, which leaves step 3 room for recomputations: the plan is faster (+85.8% over the ideal
// device instead of +89.1%) in 40% less time (bench/resnet1517-scale.sh).
// What each trial costs (none of this changes a decision): a trial whose time is not read (the
// keep scans, a leaf's first fit, the estimate step's and the swap-in scheduling's trials that run
// out of memory) is asked only whether it fits (Evaluator::fits: the engine's verdict, where it
// ran out and by how much, without the engine); the keep scans and the estimate step name the
// plan their trials change (a BaseScope), so the oracle answers a keep trial from that plan's
// allocations and a recompute trial from its lowering resumed at the backward pass (Note [One
// oracle] in search/oracle/evaluator.cpp); a run the estimate step takes is simulated once, its
// timeline ranking the maps left. Speculation: where a keep scan goes one map at a time (nearly
// every trial refused), it tells the oracle to expect the next PoochLimits::speculative_trials
// single-map trials against the current plan (Evaluator::expect: answered at once, in parallel,
// where the plan's allocations answer them) and uses the answers in order until one fits;
// the answers after it were made against the plan it replaced and are dropped. The decisions are
// the one-by-one scan's whatever the width or the number of threads (pooch_test); the width is
// fixed, so the work done is too. Step 3's estimate loop offers, beside each trial, the trial it
// makes next if this one is refused (the run halved, or the next map alone) to an idle core
// (run_beside: skipped when every core is busy, as in `memplan compare` while the other policies
// run; timing it on a busy core made compare slower) and uses the answer when the first trial is
// refused (two in three trials on ResNet-1517 b16 in 8 GiB); the decisions are the loop's one
// trial at a time (pooch_test).
// Swap-ins start as soon as memory has room (Note [PoocH's swap-in scheduling]) in the all-swap
// profile, on each leaf of the keep/swap tree before it is timed, and on the final plan; step 3
// measures r with the default points (one op before the first backward use): with scheduled
// swap-ins memory is full up to each use and few recomputations would fit. APPROXIMATION: the
// keep scans and r do not reschedule each trial plan (a lowering and up to three simulations
// more per trial).
#include <algorithm>
#include <limits>
#include <memory>
#include <span>

#include <oneapi/tbb/enumerable_thread_specific.h>

#include <fmt/core.h>

#include "memory/device_arena.hpp"
#include "search/parallel.hpp"
#include "search/policies/policy.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {
namespace {

// Step 3 measures r exactly (two simulations per map) for at most this many candidates a pass;
// beyond, it estimates r (recompute_by_estimate).
constexpr std::size_t kMeasuredCandidates = 256;
// Maps refused in a row that end step 3 when r is estimated, and a long keep scan.
constexpr std::size_t kRefusalsInARow = 32;
// A keep scan of more maps than this is long (Note [PoocH in memplan], the keep scan).
constexpr std::size_t kLongScan = 256;

struct Exposure {
  sim::Nanoseconds swap_out_ns = 0;
  sim::Nanoseconds swap_in_ns = 0;
};

std::vector<Exposure> exposures(const sim::Timeline& timeline, const NetworkView& view) {
  std::vector<Exposure> result(view.feature_maps().size());
  for (const sim::Stall& s : timeline.stalls) {
    if (s.tensor == sim::kNoTensor) continue;
    const int m = view.map_index(s.tensor);
    if (m < 0) continue;
    auto& e = result[static_cast<std::size_t>(m)];
    if (s.cause == sim::StallCause::kSwapOut) e.swap_out_ns += s.end_ns - s.start_ns;
    if (s.cause == sim::StallCause::kSwapIn) e.swap_in_ns += s.end_ns - s.start_ns;
  }
  return result;
}

sim::Nanoseconds time_or_infinity(const Evaluation& e) {
  return e.feasible ? e.iteration_ns : std::numeric_limits<sim::Nanoseconds>::max();
}

}  // namespace

namespace {

// Where keeping `m` instead of swapping it adds memory: after its last forward use, before the
// default prefetch (one op ahead of its first backward use) brings it back.
struct AwayWindow {
  sim::OpId after;   // the last forward use (or the producer)
  sim::OpId before;  // the first backward use minus one
};
AwayWindow away_window(const NetworkView& view, int m) {
  const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(m)];
  return {fm.forward_uses.empty() ? view.producer(m) : fm.forward_uses.back(),
          fm.backward_uses.front() - 1};
}

// A map that could not be kept: memory ran out at `op` with it kept (Note [PoocH in memplan],
// the keep scan).
struct Refusal {
  sim::OpId op;
  sim::Bytes bytes;
};

// The single-map trials of a keep scan, expected `width` at a time against one plan (Note [PoocH
// in memplan], the keep scan: speculation): before the scan asks about keeping maps[i] alone,
// ahead(i) makes sure the oracle expects it, from the last batch when that holds maps[i], else
// with a new batch of maps[i] and the next maps not known to be refused now. A refusal only adds
// to what is known refused, which the scan checks again before it asks, so a batch stays right
// until the plan changes (forget()).
class SpeculativeKeeps {
 public:
  SpeculativeKeeps(Evaluator& evaluator, const std::vector<int>& maps, std::size_t width)
      : evaluator_(evaluator),
        maps_(maps),
        trials_(std::max<std::size_t>(1, width)),
        position_(trials_.size()) {}

  template <typename KnownRefused>
  void ahead(const sim::Plan& plan, std::size_t i, KnownRefused&& known_refused) {
    while (next_ < count_ && position_[next_] < i) ++next_;
    if (next_ < count_ && position_[next_] == i) return;
    count_ = 0;
    for (std::size_t j = i; j < maps_.size() && count_ < trials_.size(); ++j) {
      if (j != i && known_refused(maps_[j])) continue;
      trials_[count_] = plan;
      trials_[count_].decisions[static_cast<std::size_t>(maps_[j])].action = sim::Action::kKeep;
      position_[count_++] = j;
    }
    evaluator_.expect(std::span<const sim::Plan>(trials_.data(), count_));
    next_ = 0;
  }
  /// The plan changed: the batch was made against the old one.
  void forget() { count_ = next_ = 0; }

 private:
  Evaluator& evaluator_;
  const std::vector<int>& maps_;
  std::vector<sim::Plan> trials_;
  std::vector<std::size_t> position_;  // of the trials' maps in maps_
  std::size_t count_ = 0;              // trials in the batch
  std::size_t next_ = 0;               // the first not asked about yet
};

// From `maps` in order: swap -> keep while the plan fits (Note [PoocH in memplan], the keep
// scan): runs of maps are tried at once, doubling while they fit and halving when they do not;
// a map at least as large as a refused one, away across the op where that one ran out, is
// refused without a simulation; a long scan ends after kRefusalsInARow refusals in a row.
// Returns whether it ended on refusals in a row before the end of `maps`.
bool keep_while_fits(Evaluator& evaluator, sim::Plan& plan, const std::vector<int>& maps,
                     const NetworkView& view, std::size_t speculative_trials) {
  std::vector<Refusal> refused;
  auto known_refused = [&](int m) {
    const AwayWindow w = away_window(view, m);
    for (const Refusal& r : refused) {
      if (view.map_bytes(m) >= r.bytes && w.after < r.op && r.op < w.before) return true;
    }
    return false;
  };
  // Trials keep swapped maps of `plan`: the oracle answers them from its allocations where it can
  // (Note [Keeping a swapped map, incrementally]).
  const BaseScope based(evaluator, plan);
  SpeculativeKeeps one_at_a_time(evaluator, maps, speculative_trials);
  std::vector<int> kept;
  std::size_t i = 0;
  std::size_t run = maps.size();  // everything at once first
  std::size_t refusals = 0;       // in a row
  while (i < maps.size()) {
    if (maps.size() > kLongScan && refusals == kRefusalsInARow) break;
    if (known_refused(maps[i])) {
      ++i;
      continue;
    }
    if (run == 1) one_at_a_time.ahead(plan, i, known_refused);
    std::size_t end = i;
    kept.clear();
    while (end < maps.size() && end - i < run) {
      if (end == i || !known_refused(maps[end])) kept.push_back(maps[end]);
      ++end;
    }
    sim::Plan trial = plan;
    for (int m : kept) trial.decisions[static_cast<std::size_t>(m)].action = sim::Action::kKeep;
    // Only whether it fits (and where it ran out) is read.
    const Evaluation e = evaluator.fits(trial);
    if (e.feasible) {
      plan = std::move(trial);
      evaluator.rebase(plan);
      one_at_a_time.forget();
      refusals = 0;
      i = end;
      run *= 2;
    } else if (end - i == 1) {
      if (e.oom_op != sim::kNoOp) refused.push_back({e.oom_op, view.map_bytes(maps[i])});
      ++refusals;
      ++i;  // stays swapped
    } else {
      run = (end - i) / 2;
    }
  }
  return i < maps.size();
}

// The swapped maps whose r(X) may be below 1 on the evidence of the plan's timeline (Note [PoocH
// in memplan], step 3): the compute stream waited for their copies (the swap costs time), for at
// least as long as re-running their producer takes.
std::vector<int> recompute_candidates(const sim::Timeline& timeline, const sim::Plan& plan,
                                      const NetworkView& view) {
  const std::vector<Exposure> exposed = exposures(timeline, view);
  std::vector<int> out;
  for (std::size_t m = 0; m < exposed.size(); ++m) {
    if (plan.decisions[m].action != sim::Action::kSwap) continue;
    const sim::Nanoseconds waited = exposed[m].swap_in_ns + exposed[m].swap_out_ns;
    const sim::Nanoseconds rerun =
        view.workload().op(view.producer(static_cast<int>(m))).duration_ns;
    if (waited > 0 && rerun <= waited) out.push_back(static_cast<int>(m));
  }
  return out;
}

// The timeline of a trial that fits, else nullptr: fits() first, so that a trial that does not
// fit is never run, and timeline() then runs the lowering fits() made.
const sim::Timeline* timeline_if_fits(Evaluator& evaluator, const sim::Plan& trial) {
  return evaluator.fits(trial).feasible ? &evaluator.timeline(trial) : nullptr;
}

// Step 3 when a pass would measure more than kMeasuredCandidates maps (Note [PoocH in memplan]):
// r estimated from the timeline (the stalls on a map's copies against its producer's time),
// smallest first, taken in runs that double while the plan gets faster and halve when it does
// not; a map that alone does not make it faster is refused; kRefusalsInARow refusals in a row end
// the step.
void recompute_by_estimate(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan) {
  std::vector<char> refused(plan.decisions.size(), 0);
  std::vector<std::pair<double, int>> order;
  sim::Nanoseconds current = 0;
  // The estimated r < 1 of the swapped maps not refused, smallest first, from the plan's timeline.
  auto rank = [&](const sim::Timeline& timeline) {
    current = timeline.feasible ? timeline.iteration_ns : 0;
    const std::vector<Exposure> exposed = exposures(timeline, view);
    order.clear();
    for (int m : recompute_candidates(timeline, plan, view)) {
      if (refused[static_cast<std::size_t>(m)] != 0) continue;
      const auto& e = exposed[static_cast<std::size_t>(m)];
      order.emplace_back(static_cast<double>(view.workload().op(view.producer(m)).duration_ns) /
                             static_cast<double>(e.swap_in_ns + e.swap_out_ns),
                         m);
    }
    std::stable_sort(order.begin(), order.end());
  };
  rank(evaluator.timeline(plan));
  // The plan with the `k` maps of the order from `first` on recomputed.
  auto trial_of = [&](std::size_t first, std::size_t k) {
    sim::Plan trial = plan;
    for (std::size_t i = first; i < first + k; ++i) {
      auto& d = trial.decisions[static_cast<std::size_t>(order[i].second)];
      d.action = sim::Action::kRecompute;
      d.prefetch_before = sim::kNoOp;
    }
    return trial;
  };
  // Every trial recomputes maps this plan swaps: the oracle lowers and replays it from this plan's
  // lowering and replay where the backward pass starts (Note [Resuming a memory check]).
  const BaseScope based(evaluator, plan);
  // The trial the loop makes next if this one is refused, timed by an idle core if there is one
  // (Note [PoocH in memplan], step 3: speculation).
  Evaluator beside(evaluator.workload(), evaluator.machine(), evaluator.collective_ready_ns());
  beside.stop_when(evaluator.stop());
  beside.share_base(evaluator);
  std::size_t run = 1;
  std::size_t refusals = 0;
  auto going = [&] { return current > 0 && !order.empty() && refusals < kRefusalsInARow; };
  // Takes a trial of k maps that fits and makes the plan faster, else refuses it (k == 1) or
  // halves the run; returns whether it was taken. A trial that does not fit is refused on its
  // memory alone; one that fits is simulated once, and its timeline ranks the maps left.
  auto decide = [&](sim::Plan& trial, const sim::Timeline* timeline, std::size_t k) {
    if (timeline != nullptr && timeline->feasible && timeline->iteration_ns < current) {
      plan = std::move(trial);
      run *= 2;
      refusals = 0;
      rank(*timeline);
      return true;
    }
    if (k == 1) {
      refused[static_cast<std::size_t>(order.front().second)] = 1;
      order.erase(order.begin());
      ++refusals;
    } else {
      run = k / 2;
    }
    return false;
  };
  while (going()) {
    const std::size_t k = std::min(run, order.size());
    sim::Plan trial = trial_of(0, k);
    // Refused, a run of k > 1 is halved; a single map is refused and the next one tried.
    const bool next_exists = k > 1 || (order.size() > 1 && refusals + 1 < kRefusalsInARow);
    sim::Plan next;  // made by the idle core, if one takes it up
    const sim::Timeline* timeline = nullptr;
    const sim::Timeline* next_timeline = nullptr;
    const bool timed_next = run_beside([&] { timeline = timeline_if_fits(evaluator, trial); },
                                       [&] {
                                         if (!next_exists) return;
                                         next = k > 1 ? trial_of(0, k / 2) : trial_of(1, 1);
                                         next_timeline = timeline_if_fits(beside, next);
                                       });
    if (decide(trial, timeline, k) || !next_exists || !timed_next || !going()) continue;
    decide(next, next_timeline, std::min(run, order.size()));
  }
  evaluator.credit(beside.count(), beside.memory_checks());
}

}  // namespace

// Note [PoocH's swap-in scheduling]
// PoocH starts each swap-in as soon as device memory has room for it, in the order the maps are
// needed (one copy queue), rather than one op ahead. In a plan that is each swapped map's
// prefetch_before, found from one lowering of the plan with every swap-in at its default point:
// need[s] is the most live bytes (arena-rounded) at op s's allocations and run
// (live_need_per_op). Taking the swapped
// maps by their default point, earliest first, a map's swap-in moves from its default point d to
// the earliest op p, after its last forward use and no earlier than the previous map's, such that
// need[s] + its bytes stays within the device over every op s in [p, d); those ops then count its
// bytes. The arena can still lack a hole of the map's size where the live bytes have room
// (fragmentation): then the plan is scheduled again with the capacity lowered by what the
// simulation found missing (doubling), and left at the default points when that does not fit.
namespace {

// Most live bytes at each op's allocations and run: op i's part of the compute stream runs from
// after op i-1's run through op i's run (the frees after op i-1's run come first, so they count
// for op i; live bytes only rise at an allocation).
std::vector<sim::Bytes> live_need_per_op(const sim::Program& program, std::size_t op_count) {
  std::vector<sim::Bytes> need(op_count, 0);
  sim::Bytes live = 0;
  std::size_t op = 0;
  auto bytes = [&](const sim::Instruction& in) {
    return sim::DeviceArena::aligned_size(program.buffers[index(in.buffer)].bytes);
  };
  for (const sim::Instruction& in : program.stream(sim::StreamId::kCompute)) {
    if (in.kind == sim::InstrKind::kFree) live -= bytes(in);
    if (in.kind == sim::InstrKind::kAlloc) live += bytes(in);
    const bool counts = in.kind == sim::InstrKind::kAlloc || in.kind == sim::InstrKind::kRun;
    if (counts && op < op_count) need[op] = std::max(need[op], live);
    if (in.kind == sim::InstrKind::kRun) ++op;
  }
  return need;
}

// The earliest prefetch points that keep the live bytes within `capacity` (the Note above).
void hoist_swap_ins(const NetworkView& view, const sim::Program& program, sim::Bytes capacity,
                    sim::Plan& plan) {
  std::vector<sim::Bytes> need = live_need_per_op(program, view.workload().ops.size());
  struct SwapIn {
    sim::OpId at;     // the default point
    sim::OpId after;  // the last forward use (or the producer)
    int map;
  };
  std::vector<SwapIn> order;
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    if (plan.decisions[m].action != sim::Action::kSwap) continue;
    const AwayWindow w = away_window(view, static_cast<int>(m));
    const sim::OpId first_backward = w.before + 1;
    order.push_back({first_backward - 1 > w.after ? first_backward - 1 : first_backward, w.after,
                     static_cast<int>(m)});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const SwapIn& a, const SwapIn& b) { return a.at < b.at; });
  sim::OpId queue_head{0};  // where the previous swap-in started
  for (const SwapIn& s : order) {
    const sim::Bytes bytes = sim::DeviceArena::aligned_size(view.map_bytes(s.map));
    const sim::OpId earliest = std::max(s.after + 1, queue_head);
    sim::OpId p = s.at;
    while (p > earliest && need[index(p - 1)] + bytes <= capacity) --p;
    for (sim::OpId op = p; op < s.at; ++op) need[index(op)] += bytes;
    plan.decisions[static_cast<std::size_t>(s.map)].prefetch_before = p < s.at ? p : sim::kNoOp;
    queue_head = std::max(queue_head, p);
  }
}

}  // namespace

namespace {

// pooch_schedule_swap_ins, returning the evaluation of the plan it leaves (its caller times it).
// A trial is asked whether it fits first (fits: where it ran out, and by how much), and only one
// that fits is timed (cost).
Evaluation schedule_swap_ins(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan) {
  for (sim::Decision& d : plan.decisions) d.prefetch_before = sim::kNoOp;
  const Evaluation base = evaluator.cost(plan);
  if (!base.feasible) return base;
  const sim::Program program = sim::lower(view.workload(), plan);
  sim::Bytes margin = 0;
  for (;;) {
    sim::Plan trial = plan;
    hoist_swap_ins(view, program, evaluator.machine().memory_bytes - margin, trial);
    Evaluation e = evaluator.fits(trial);
    if (e.feasible) e = evaluator.cost(trial);
    if (e.feasible) {
      if (e.iteration_ns > base.iteration_ns) return base;
      plan = std::move(trial);
      return e;
    }
    margin = std::max(2 * margin, e.oom_bytes_missing);
    if (margin <= 0 || margin >= evaluator.machine().memory_bytes) return base;
  }
}

}  // namespace

void pooch_schedule_swap_ins(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan) {
  schedule_swap_ins(evaluator, view, plan);
}

PoochProfile pooch_profile(Evaluator& evaluator, const NetworkView& view) {
  sim::Plan all_swap = keep_all(view, "pooch");
  for (sim::Decision& d : all_swap.decisions) d.action = sim::Action::kSwap;
  pooch_schedule_swap_ins(evaluator, view, all_swap);
  const std::vector<Exposure> exposed = exposures(evaluator.timeline(all_swap), view);
  PoochProfile profile;
  for (std::size_t m = 0; m < exposed.size(); ++m) {
    if (exposed[m].swap_in_ns > 0) {
      profile.swap_in_exposed.push_back(static_cast<int>(m));
    } else if (exposed[m].swap_out_ns > 0) {
      profile.swap_out_only_exposed.push_back(static_cast<int>(m));
    }
  }
  auto& l_i = profile.swap_in_exposed;
  std::stable_sort(l_i.begin(), l_i.end(), [&](int a, int b) {
    return exposed[static_cast<std::size_t>(a)].swap_in_ns >
           exposed[static_cast<std::size_t>(b)].swap_in_ns;
  });
  // From the output layer backwards: maps with later producers first.
  std::stable_sort(profile.swap_out_only_exposed.begin(), profile.swap_out_only_exposed.end(),
                   [&](int a, int b) { return view.producer(a) > view.producer(b); });
  return profile;
}

PoochKeepSwap pooch_keep_swap(Evaluator& evaluator, const NetworkView& view,
                              const PoochProfile& profile, const PoochLimits& limits) {
  const std::vector<int>& l_i = profile.swap_in_exposed;
  const std::vector<int>& l_o_only = profile.swap_out_only_exposed;
  sim::Plan plan = keep_all(view, "pooch");
  for (sim::Decision& d : plan.decisions) d.action = sim::Action::kSwap;
  std::size_t enumerated = std::min({l_i.size(), limits.max_enumerated, std::size_t{62}});
  while (enumerated > 0 &&
         (std::size_t{1} << enumerated) * (1 + l_o_only.size()) > limits.leaf_simulations)
    --enumerated;

  // The all-keep leaf first.
  sim::Plan best = plan;
  sim::Nanoseconds best_ns = time_or_infinity(evaluator.cost(plan));
  std::size_t best_ended = 0;
  const std::uint64_t leaves = std::uint64_t{1} << enumerated;
  for (std::uint64_t k = 0; k < leaves; ++k) {
    const std::uint64_t leaf = leaves - 1 - k;
    sim::Plan candidate = plan;
    for (std::size_t bit = 0; bit < enumerated; ++bit) {
      if (((leaf >> bit) & 1u) != 0) {
        candidate.decisions[static_cast<std::size_t>(l_i[bit])].action = sim::Action::kKeep;
      }
    }
    // Keeping more only needs more memory.
    if (!evaluator.fits(candidate).feasible) continue;
    const bool ended =
        keep_while_fits(evaluator, candidate, l_o_only, view, limits.speculative_trials);
    const sim::Nanoseconds t = time_or_infinity(schedule_swap_ins(evaluator, view, candidate));
    if (t < best_ns) {
      best_ns = t;
      best = candidate;
      best_ended = ended ? 1 : 0;
    }
    if (k == 0) break;  // every enumerated map kept, and it fits: nothing is faster
  }
  if (l_i.size() > enumerated) {
    // The rest of L_I, from the output layer backwards, on the best leaf.
    std::vector<int> rest(l_i.begin() + static_cast<std::ptrdiff_t>(enumerated), l_i.end());
    std::stable_sort(rest.begin(), rest.end(),
                     [&](int a, int b) { return view.producer(a) > view.producer(b); });
    if (keep_while_fits(evaluator, best, rest, view, limits.speculative_trials)) ++best_ended;
  }
  return {std::move(best), enumerated, best_ended};
}

namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();

// r(X) of one swapped map against a plan (Note [PoocH in memplan], step 3), with a pair of
// Evaluators per worker thread: one under the budget, one with unlimited memory (the reference).
class RatioMeter {
 public:
  explicit RatioMeter(Evaluator& evaluator)
      : evaluator_(evaluator), unlimited_(evaluator.machine()), local_([this] {
          auto ev = std::make_unique<Evaluators>(evaluator_, unlimited_);
          ev->budget.stop_when(evaluator_.stop());
          ev->reference.stop_when(evaluator_.stop());
          return ev;
        }) {
    unlimited_.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
  }
  RatioMeter(const RatioMeter&) = delete;
  RatioMeter& operator=(const RatioMeter&) = delete;
  ~RatioMeter() {
    for (const auto& ev : local_) evaluator_.credit(ev->budget.count() + ev->reference.count());
  }

  /// r of map m against `plan`, whose iteration time is `current`; infinite when m is not
  /// swapped, its swap costs nothing or its recomputation does not fit. Thread-safe.
  double measure(const sim::Plan& plan, sim::Nanoseconds current, std::size_t m) {
    if (plan.decisions[m].action != sim::Action::kSwap) return kInfinite;
    Evaluators& ev = *local_.local();
    sim::Plan candidate = plan;
    candidate.decisions[m].action = sim::Action::kKeep;
    const sim::Nanoseconds base = ev.reference.cost(candidate).iteration_ns;
    const sim::Nanoseconds swap_overhead = current - base;
    if (swap_overhead <= 0) return kInfinite;  // the swap is free: r is infinite
    candidate.decisions[m].action = sim::Action::kRecompute;
    candidate.decisions[m].prefetch_before = sim::kNoOp;
    const Evaluation e = ev.budget.cost(candidate);
    if (!e.feasible) return kInfinite;
    return static_cast<double>(e.iteration_ns - base) / static_cast<double>(swap_overhead);
  }

 private:
  struct Evaluators {
    // Both priced as `of` prices (its machine, then `u`; its ready times).
    Evaluators(const Evaluator& of, const sim::Machine& u)
        : budget(of.workload(), of.machine(), of.collective_ready_ns()),
          reference(of.workload(), u, of.collective_ready_ns()) {}
    Evaluator budget;
    Evaluator reference;
  };
  Evaluator& evaluator_;
  sim::Machine unlimited_;
  tbb::enumerable_thread_specific<std::unique_ptr<Evaluators>> local_;
};

// The lazy choice of one full pass (Note [PoocH in memplan], step 3): from the maps' cached r
// (measured against `plan`), take the smallest r < 1 after re-measuring it against the current
// plan, until none is left. Returns whether any map was measured below 1.
bool take_smallest_ratios(Evaluator& evaluator, RatioMeter& meter, const std::vector<double>& ratio,
                          sim::Nanoseconds current, sim::Plan& plan) {
  // (r, map) with r < 1, smallest first; ties by map order.
  std::vector<std::pair<double, std::size_t>> queue;
  for (std::size_t m = 0; m < ratio.size(); ++m)
    if (ratio[m] < 1.0) queue.emplace_back(ratio[m], m);
  if (queue.empty()) return false;
  const auto later = [](const auto& a, const auto& b) { return a > b; };
  std::make_heap(queue.begin(), queue.end(), later);
  bool fresh = true;  // the cached values were measured against the current plan
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const std::size_t m = queue.back().second;
    queue.pop_back();
    const double r = fresh ? ratio[m] : meter.measure(plan, current, m);
    if (!(r < 1.0)) continue;
    if (!fresh && !queue.empty() && r > queue.front().first) {
      queue.emplace_back(r, m);
      std::push_heap(queue.begin(), queue.end(), later);
      continue;
    }
    plan.decisions[m].action = sim::Action::kRecompute;
    plan.decisions[m].prefetch_before = sim::kNoOp;
    current = time_or_infinity(evaluator.cost(plan));
    fresh = false;
  }
  return true;
}

// Step 3: swap -> recompute by r(X), lazily (Note [PoocH in memplan]). Measuring r is independent
// per map: the full passes run in parallel and the choices scan maps in order, so the result does
// not depend on the number of threads.
void recompute_by_ratio(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan) {
  RatioMeter meter(evaluator);
  std::vector<double> ratio(plan.decisions.size());
  for (;;) {
    // A full pass over the swapped maps the current timeline says might have r < 1.
    const sim::Timeline& timeline = evaluator.timeline(plan);
    const sim::Nanoseconds current =
        timeline.feasible ? timeline.iteration_ns : std::numeric_limits<sim::Nanoseconds>::max();
    const std::vector<int> candidates = recompute_candidates(timeline, plan, view);
    if (candidates.size() > kMeasuredCandidates) {
      recompute_by_estimate(evaluator, view, plan);
      return;
    }
    std::fill(ratio.begin(), ratio.end(), kInfinite);
    parallel_each(0, candidates.size(), [&](std::size_t k) {
      const auto m = static_cast<std::size_t>(candidates[k]);
      ratio[m] = meter.measure(plan, current, m);
    });
    if (!take_smallest_ratios(evaluator, meter, ratio, current, plan)) return;
  }
}

}  // namespace

PolicyDecision decide_pooch(Evaluator& evaluator, const NetworkView& view) {
  // 1. Profile all-swap. 2. Keep/swap enumeration. 3. Swap -> recompute by r(X).
  const PoochProfile profile = pooch_profile(evaluator, view);
  PoochKeepSwap keep_swap = pooch_keep_swap(evaluator, view, profile);
  sim::Plan plan = std::move(keep_swap.plan);
  // Step 3 measures r with every swap-in at its default point: with the scheduled ones, memory is
  // full up to each swap-in's use and few recomputations would fit. The final plan is scheduled.
  for (sim::Decision& d : plan.decisions) d.prefetch_before = sim::kNoOp;
  recompute_by_ratio(evaluator, view, plan);
  pooch_schedule_swap_ins(evaluator, view, plan);
  // Chainer frees through CuPy's memory pool, stream-ordered: compute does not wait for a
  // copy-out to free its map (Note [Release point] in core/plan.hpp).
  const bool deferred = defer_releases(evaluator, view, plan);
  const auto counts = plan.action_counts();
  std::string note =
      fmt::format("|L_I|={} (enumerated {}), |L_O\\L_I|={}; {} keep / {} swap / {} recompute",
                  profile.swap_in_exposed.size(), keep_swap.enumerated,
                  profile.swap_out_only_exposed.size(), counts[0], counts[1], counts[2]);
  if (keep_swap.scans_ended > 0)
    note += fmt::format("; {} keep scan(s) ended after {} refusals in a row", keep_swap.scans_ended,
                        kRefusalsInARow);
  if (deferred) note += "; frees after copy-outs";
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
