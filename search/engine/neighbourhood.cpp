#include "search/engine/neighbourhood.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <tuple>

#include "core/check.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search::engine {

Neighbourhood::Neighbourhood(const NetworkView& view, const EncodingOptions& encodings,
                             bool host_placement, bool release_points)
    : view_(view), release_points_(release_points) {
  for (const sim::Op& op : view.workload().ops) {
    if (!op.algorithms.empty()) algorithm_ops_.push_back(op.id);
  }
  side_made_.reserve(view.feature_maps().size());
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m)
    side_made_.push_back(view.workload().op(view.producer(static_cast<int>(m))).stream != 0 ? 1
                                                                                            : 0);
  std::vector<std::vector<int>> written(view.workload().ops.size());  // per op, its maps
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m)
    written[index(view.producer(static_cast<int>(m)))].push_back(static_cast<int>(m));
  siblings_.resize(view.feature_maps().size());
  for (const std::vector<int>& maps : written) {
    if (maps.size() < 2) continue;
    for (int m : maps) {
      for (int o : maps) {
        if (o != m) siblings_[static_cast<std::size_t>(m)].push_back(o);
      }
    }
  }
  actions_ = {{sim::Action::kKeep, sim::Encoding::kNone},
              {sim::Action::kSwap, sim::Encoding::kNone},
              {sim::Action::kRecompute, sim::Encoding::kNone}};
  if (encodings.binarize) actions_.emplace_back(sim::Action::kEncode, sim::Encoding::kBinarize);
  if (encodings.sparse) actions_.emplace_back(sim::Action::kEncode, sim::Encoding::kSparse);
  if (encodings.precision_reduction)
    actions_.emplace_back(sim::Action::kEncode, *encodings.precision_reduction);
  if (!host_placement) return;
  const sim::Workload& w = view.workload();
  placeable_[0] = !sim::host_placeable(w, sim::TensorKind::kParameter).empty();
  sim::Plan update = keep_all(view, "");
  apply(update, Placement::kUpdate, true, false);
  placeable_[1] = sim::host_update_problem(update, w).empty();
  placeable_[2] = !sim::host_placeable(w, sim::TensorKind::kInput).empty();
  // Every group any placement can have: those of an update on the device include the others.
  readers_.resize(w.tensors.size());
  for (const sim::Op& op : w.ops) {
    for (sim::TensorId x : op.inputs) readers_[index(x)].push_back(op.id);
  }
  std::vector<sim::HostUseGroup> groups;
  for (sim::TensorKind kind : {sim::TensorKind::kParameter, sim::TensorKind::kGradient,
                               sim::TensorKind::kOptimizerState, sim::TensorKind::kInput}) {
    for (sim::TensorId t : sim::host_placeable(w, kind)) {
      sim::host_use_groups(t, readers_[index(t)], false, w, groups);
      for (const sim::HostUseGroup& g : groups) host_groups_.emplace_back(t, g.first_use);
    }
  }
  std::sort(host_groups_.begin(), host_groups_.end());
  states_ = sim::host_placeable(w, sim::TensorKind::kOptimizerState);
  for (sim::TensorId t : states_) state_bytes_ += static_cast<double>(w.tensor(t).bytes);
}

// Sets a placement variable of `plan` (Note [Host placement] in core/plan.hpp); `at_use`: the
// groups of the tensors it places are prefetched at their first uses, not one op ahead.
void Neighbourhood::apply(sim::Plan& plan, Placement placement, bool on, bool at_use,
                          Stay stay) const {
  const sim::Workload& w = view_.workload();
  switch (placement) {
    case Placement::kParameters:
      sim::set_host_placement(plan, w, sim::TensorKind::kParameter, on);
      if (on && at_use) prefetch_at_first_uses(plan, sim::TensorKind::kParameter);
      break;
    case Placement::kUpdate:
      if (on || stay != Stay::kStatesAndGradients)
        sim::set_host_placement(plan, w, sim::TensorKind::kGradient, on);
      if (on || stay == Stay::kNothing)
        sim::set_host_placement(plan, w, sim::TensorKind::kOptimizerState, on);
      plan.host_update = on;
      sim::drop_stale_host_prefetches(plan, w);  // an update's groups come and go with it
      break;
    case Placement::kInputs:
      sim::set_host_placement(plan, w, sim::TensorKind::kInput, on);
      if (on && at_use) prefetch_at_first_uses(plan, sim::TensorKind::kInput);
      break;
    case Placement::kNone:
      break;
  }
}

// Every single change of `plan`, grouped by variable in variable order.
std::vector<Change> Neighbourhood::changes(const sim::Plan& plan) const {
  std::vector<Change> out;
  const sim::Workload& w = view_.workload();
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    const sim::Decision& d = plan.decisions[m];
    const sim::FeatureMap& fm = view_.feature_maps()[m];
    for (const auto& [action, encoding] : actions_) {
      if (action == d.action && encoding == d.encoding) continue;
      sim::Decision candidate = d;
      candidate.action = action;
      candidate.encoding = encoding;
      candidate.prefetch_before = sim::kNoOp;
      candidate.per_use = false;
      if (!sim::decision_problem(candidate, fm, w).empty()) continue;
      out.push_back(map_change(m, action, encoding, sim::kNoOp));
      if (issued_early(m, action)) {
        // A swap whose prefetch starts earlier than the default (one op ahead): PoocH's "as
        // soon as memory has room" is one of these; a side-stream re-run issued ahead of its use
        // (FSDP's backward prefetch). In a short window, every point.
        const auto [last_forward, first_backward] = prefetch_window(static_cast<int>(m));
        if (first_backward - last_forward <= kEveryPrefetchPoint) {
          for (sim::OpId at = last_forward + 1; at <= first_backward; ++at) {
            if (at != default_issue(static_cast<int>(m), action))
              out.push_back(map_change(m, action, encoding, at));
          }
        } else {
          for (std::int32_t ahead : {4, 16, 64, 256}) {
            const sim::OpId at = first_backward - ahead;
            if (at <= last_forward) break;
            out.push_back(map_change(m, action, encoding, at));
          }
        }
      }
    }
    if (issued_early(m, d.action)) issue_point_changes(m, d, out);
  }
  // Each op with alternative algorithms: any other of them, or its default.
  for (std::size_t k = 0; k < algorithm_ops_.size(); ++k) {
    const sim::OpId op = algorithm_ops_[k];
    const auto current = chosen_algorithm(plan, op);
    const auto count = static_cast<std::int32_t>(w.op(op).algorithms.size());
    for (std::int32_t a = -1; a < count; ++a) {
      if (a == current) continue;
      Change c;
      c.variable = static_cast<int>(plan.decisions.size() + k);
      c.op = op;
      c.algorithm = a;
      out.push_back(c);
    }
  }
  placement_changes(plan, out);
  host_prefetch_changes(plan, out);
  state_changes(plan, out);
  return out;
}

// Each placement that the workload offers: the other value.
void Neighbourhood::placement_changes(const sim::Plan& plan, std::vector<Change>& out) const {
  for (std::size_t k = 0; k < kPlacementCount; ++k) {
    if (!placeable_[k]) continue;
    Change c;
    c.variable = static_cast<int>(plan.decisions.size() + algorithm_ops_.size() + k);
    c.placement = static_cast<Placement>(k);
    c.on = !placed(plan, c.placement);
    out.push_back(c);
    // Placed with each copy issued at its use: the least memory ahead of each group, what a
    // tensor needs when the op before its use is the step's peak (a batch read by the first
    // layer's backward op, after the second's).
    if (c.on && c.placement != Placement::kUpdate) {
      c.at_use = true;
      out.push_back(c);
    }
    if (c.placement != Placement::kUpdate) continue;
    // The update back on the device with the optimizer states left on the host: from there each
    // state is a variable of its own (below), so that a plan can move just the ones it must; and
    // with the gradients left there too. With the update on the device and gradients on the host:
    // the gradients back (the states as they are).
    if (!c.on) {
      c.stay = Stay::kStates;
      if (!states_.empty()) out.push_back(c);
      c.stay = Stay::kStatesAndGradients;
      out.push_back(c);
    } else if (any_placed(plan, sim::TensorKind::kGradient)) {
      c.on = false;
      c.stay = Stay::kStates;
      out.push_back(c);
    }
  }
}

// Each optimizer state on its own, the update on the device: the other value. (With the update on
// the host every state is there.)
void Neighbourhood::state_changes(const sim::Plan& plan, std::vector<Change>& out) const {
  if (plan.host_update) return;
  const std::size_t first = first_state_variable();
  for (std::size_t k = 0; k < states_.size(); ++k) {
    Change c;
    c.variable = static_cast<int>(first + k);
    c.state = states_[k];
    c.on = !std::binary_search(plan.host_tensors.begin(), plan.host_tensors.end(), states_[k]);
    out.push_back(c);
  }
}

void Neighbourhood::blame_states(const sim::Timeline& timeline, const sim::Plan& plan,
                                 std::vector<double>& score) const {
  if (!timeline.oom || plan.host_update || state_bytes_ <= 0) return;
  const std::size_t first = first_state_variable();
  for (std::size_t k = 0; k < states_.size(); ++k)
    score[first + k] +=
        1e9 * static_cast<double>(workload().tensor(states_[k]).bytes) / state_bytes_;
}

// For each group of uses of a host-placed tensor: its prefetch point 1, 4 or 16 ops earlier or
// later within its window, at the first use, or back to the default (Note [Host placement]).
void Neighbourhood::host_prefetch_changes(const sim::Plan& plan, std::vector<Change>& out) const {
  std::vector<sim::HostUseGroup> groups;
  std::vector<sim::OpId> points;
  for (sim::TensorId t : plan.host_tensors) {
    groups_of(plan, t, groups);
    for (const sim::HostUseGroup& g : groups) {
      const sim::OpId current = sim::host_prefetch_point(plan, t, g);
      points.clear();
      for (std::int32_t delta : {-16, -4, -1, 1, 4, 16}) points.push_back(current + delta);
      points.push_back(g.first_use);
      points.push_back(g.default_prefetch);
      std::sort(points.begin(), points.end());
      points.erase(std::unique(points.begin(), points.end()), points.end());
      for (sim::OpId at : points) {
        if (at < g.earliest_prefetch || at > g.first_use || at == current) continue;
        Change c;
        c.variable = static_cast<int>(host_group_variable(t, g.first_use));
        c.host_tensor = t;
        c.first_use = g.first_use;
        c.prefetch_before = at == g.default_prefetch ? sim::kNoOp : at;
        out.push_back(c);
      }
    }
  }
}

// Every group of the host-placed tensors of `kind` prefetched at its first use.
void Neighbourhood::prefetch_at_first_uses(sim::Plan& plan, sim::TensorKind kind) const {
  const sim::Workload& w = view_.workload();
  std::vector<sim::HostUseGroup> groups;
  for (sim::TensorId t : plan.host_tensors) {
    if (w.tensor(t).kind != kind) continue;
    groups_of(plan, t, groups);
    for (const sim::HostUseGroup& g : groups) {
      if (g.default_prefetch == g.first_use) continue;
      const auto it = find_host_prefetch(plan.host_prefetches, t, g.first_use);
      if (it != plan.host_prefetches.end() && it->tensor == t && it->first_use == g.first_use)
        continue;  // the plan's own point
      plan.host_prefetches.insert(it, {t, g.first_use, g.first_use});
    }
  }
}

// Adds to `score` (per variable) the blame of the host groups' prefetch points: the stalls
// waiting for a group's copy (at the group's ops), and a large weight for each group whose copy
// was resident ahead of its first use at the op where memory ran out.
void Neighbourhood::blame_host_groups(const sim::Timeline& timeline, const sim::Plan& plan,
                                      std::vector<double>& score) const {
  if (plan.host_tensors.empty()) return;
  for (const sim::Stall& s : timeline.stalls) {
    if (s.tensor == sim::kNoTensor || s.op == sim::kNoOp) continue;
    // The group the waiting op belongs to: the last one of the tensor starting at or before it.
    const auto after =
        std::upper_bound(host_groups_.begin(), host_groups_.end(), std::pair(s.tensor, s.op));
    if (after == host_groups_.begin() || std::prev(after)->first != s.tensor) continue;
    const std::pair<sim::TensorId, sim::OpId>& group = *std::prev(after);
    score[host_group_variable(group.first, group.second)] +=
        static_cast<double>(s.end_ns - s.start_ns);
  }
  if (!timeline.oom || timeline.oom->op == sim::kNoOp) return;
  const sim::OpId at = timeline.oom->op;
  std::vector<sim::HostUseGroup> groups;
  for (sim::TensorId t : plan.host_tensors) {
    groups_of(plan, t, groups);
    for (const sim::HostUseGroup& g : groups) {
      if (sim::host_prefetch_point(plan, t, g) <= at && at < g.first_use) {
        score[host_group_variable(t, g.first_use)] +=
            1e9 + static_cast<double>(view_.workload().tensor(t).bytes);
      }
    }
  }
}

// The prefetched groups of a host-placed tensor of `plan`.
void Neighbourhood::groups_of(const sim::Plan& plan, sim::TensorId t,
                              std::vector<sim::HostUseGroup>& groups) const {
  sim::host_use_groups(t, readers_[index(t)], plan.host_update, view_.workload(), groups);
}
// The first of `prefetches` (ascending) at or after (t, first_use).
std::vector<sim::HostPrefetch>::const_iterator Neighbourhood::find_host_prefetch(
    const std::vector<sim::HostPrefetch>& prefetches, sim::TensorId t, sim::OpId first_use) {
  return std::lower_bound(prefetches.begin(), prefetches.end(), std::pair(t, first_use),
                          [](const sim::HostPrefetch& p, std::pair<sim::TensorId, sim::OpId> key) {
                            return std::pair(p.tensor, p.first_use) < key;
                          });
}
// The variable of a host group (Change::variable).
std::size_t Neighbourhood::host_group_variable(sim::TensorId t, sim::OpId first_use) const {
  const auto it =
      std::lower_bound(host_groups_.begin(), host_groups_.end(), std::pair(t, first_use));
  MEMPLAN_CHECK(it != host_groups_.end() && *it == std::pair(t, first_use),
                "every group of a host-placed tensor is one of those of an update on the device");
  return view_.feature_maps().size() + algorithm_ops_.size() + kPlacementCount +
         static_cast<std::size_t>(it - host_groups_.begin());
}

// Whether the search varies where `action` of map m is issued: a swap's prefetch, and the re-run
// of a map an op of another stream makes (Note [Issue point of a recomputation] in
// core/plan.hpp); a recomputation on the compute stream issued early only holds memory longer.
bool Neighbourhood::issued_early(std::size_t m, sim::Action action) const {
  return action == sim::Action::kSwap || (action == sim::Action::kRecompute && side_made_[m] != 0);
}
// Where the lowering issues `action` of map m when the plan names no point.
sim::OpId Neighbourhood::default_issue(int m, sim::Action action) const {
  return action == sim::Action::kSwap ? default_prefetch(m) : prefetch_window(m).second;
}

// The other prefetch (or issue) and release points of a swapped (or re-run) map (Note [Release
// point] in core/plan.hpp).
void Neighbourhood::issue_point_changes(std::size_t m, const sim::Decision& d,
                                        std::vector<Change>& out) const {
  // Named copies, not a structured binding: clang-tidy 14's parser cannot capture one.
  const std::pair<sim::OpId, sim::OpId> window = prefetch_window(static_cast<int>(m));
  const sim::OpId last_forward = window.first;
  const sim::OpId first_backward = window.second;
  const sim::OpId fallback = default_issue(static_cast<int>(m), d.action);
  const sim::OpId current = d.prefetch_before != sim::kNoOp ? d.prefetch_before : fallback;
  auto add = [&](sim::OpId at) {
    if (at <= last_forward || at > first_backward || at == current) return;
    Change c = map_change(m, d.action, sim::Encoding::kNone, at == fallback ? sim::kNoOp : at);
    if (d.release_before <= at) c.release_before = d.release_before;  // still valid
    out.push_back(c);
  };
  if (first_backward - last_forward <= kEveryPrefetchPoint) {
    for (sim::OpId at = last_forward + 1; at <= first_backward; ++at) add(at);
  } else {
    for (std::int32_t delta : {-64, -16, -4, -1, 1}) add(current + delta);
  }
  if (!release_points_ || d.action != sim::Action::kSwap) return;
  // Its release point (Note [Release point]): at the last forward use (kNoOp), or later, up
  // to the prefetch point.
  const sim::OpId released = d.release_before != sim::kNoOp ? d.release_before : last_forward;
  auto release = [&](sim::OpId at) {
    if (at < last_forward || at > current || at == released) return;
    Change c = map_change(m, sim::Action::kSwap, sim::Encoding::kNone, d.prefetch_before);
    c.release_before = at == last_forward ? sim::kNoOp : at;
    out.push_back(c);
  };
  for (std::int32_t delta : {-16, -4, -1, 1, 4, 16}) release(released + delta);
  release(last_forward);
}

// Note [Sibling moves]
// ~~~~~~~~~~~~~~~~~~~~
// An op that writes several feature maps (batch norm's output with its saved mean and inverse
// deviation, dropout's output and mask, max pooling's output and indices) re-runs for all of
// them at once: recomputing one of its maps while a sibling is kept or swapped keeps the
// producer's inputs needed, and swapping one while a sibling is recomputed pays both. A single
// change moves one of them, and the pair that moves the whole op is one of hundreds of thousands
// on a real network, which sampled pairs rarely draw (GPT-2's first dropout: its output and mask
// recomputed hold the 147 MiB embedding table on the device for the whole step, where both kept
// or swapped free it after the first op). So the sweep of every single change (Note [Plan
// search], widening: a round that found nothing) goes on with each single change of a map's
// action to keep, swap or recompute made again with the map's siblings given the same action
// (their default prefetch points), once per op and action. Not in the sampled rounds: there the
// larger moves win rounds early and lead to other local optima, often worse (MobileNetV2 b128 at
// 25% of its feature-map bytes, seeds 1 to 4: 238, 226, 185 and 116 ms, against 152, 166, 167
// and 141 without them, 148, 155, 152 and 117 with them in the sweep).
std::vector<Move> Neighbourhood::sibling_moves(const sim::Plan& plan,
                                               const std::vector<Move>& moves) const {
  std::vector<Move> out;
  std::vector<std::pair<sim::OpId, sim::Action>> done;
  for (const Move& move : moves) {
    if (move.size() != 1 || move.front().map < 0) continue;
    const Change& c = move.front();
    const auto m = static_cast<std::size_t>(c.map);
    if (siblings_[m].empty() || c.action == sim::Action::kEncode) continue;
    const std::pair<sim::OpId, sim::Action> key{view_.producer(c.map), c.action};
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    done.push_back(key);
    Move grown{c};
    for (int o : siblings_[m]) {
      if (plan.decisions[static_cast<std::size_t>(o)].action == c.action) continue;
      grown.push_back(
          map_change(static_cast<std::size_t>(o), c.action, sim::Encoding::kNone, sim::kNoOp));
    }
    if (grown.size() > 1) out.push_back(std::move(grown));
  }
  return out;
}

// Note [Timed swaps]
// ~~~~~~~~~~~~~~~~~~
// A map swapped at its default points is released right after its last forward use, where the
// compute stream waits for its whole copy-out, and prefetched one op before its first backward
// use, where it waits for most of its copy-in: a large map's swap is then far slower than keeping
// or recomputing it, and the moves that would hide its copies (Note [Moves the stalls ask for],
// the release and prefetch points' changes) come only once it is swapped, which it never is. A
// 12-layer GPT b8 at 60% of its feature-map bytes recomputes eleven attention dropouts (402 MiB
// each, 1.6 ms a re-run) with its copy engines busy a sixth of the step; each swapped at its
// default points adds 48 ms of stalls. So the sweep of every single change goes on with each
// change that swaps a map at its default points made again with its release point where the
// ops after its last forward use have run for its copy-out's time, and its prefetch point where
// the ops before its first backward use run for its copy-in's time (the ops' own durations, in
// op order; within its window, the release no later than the prefetch). They are evaluated only
// where no single change or sibling move improves (LocalSearch::evaluate_moves' first stage):
// among those, they won rounds early on MobileNetV2 b128 at 25% of its feature-map bytes and led
// to worse optima (seeds 1 and 2: 172.2 and 156.4 ms, against 148.0 and 122.4 without them).
std::vector<Move> Neighbourhood::timed_swaps(const sim::Plan& plan, const std::vector<Move>& moves,
                                             const sim::Machine& machine) const {
  std::vector<Move> out;
  for (const Move& move : moves) {
    if (move.size() != 1 || move.front().map < 0) continue;
    const Change& c = move.front();
    const auto m = static_cast<std::size_t>(c.map);
    if (c.action != sim::Action::kSwap || plan.decisions[m].action == sim::Action::kSwap ||
        c.prefetch_before != sim::kNoOp || c.release_before != sim::kNoOp)
      continue;
    const auto [last_forward, first_backward] = prefetch_window(c.map);
    const sim::Bytes bytes = view_.map_bytes(c.map);
    const sim::OpId prefetch = earlier_by(first_backward, last_forward, machine.h2d_copy_ns(bytes));
    const sim::OpId release = later_by(last_forward + 1, prefetch, machine.d2h_copy_ns(bytes));
    Change timed = map_change(m, sim::Action::kSwap, sim::Encoding::kNone,
                              prefetch == default_prefetch(c.map) ? sim::kNoOp : prefetch);
    if (release_points_ && release > last_forward + 1) timed.release_before = release;
    if (timed != c) out.push_back({timed});
  }
  return out;
}

std::vector<Move> Neighbourhood::stall_moves(const sim::Plan& plan, const sim::Timeline& timeline,
                                             std::size_t count) const {
  // (stalled ns, map, swap-out) of each swapped map's copies, the longest first.
  std::vector<std::tuple<sim::Nanoseconds, int, bool>> stalled;
  for (const sim::Stall& s : timeline.stalls) {
    if (s.tensor == sim::kNoTensor ||
        (s.cause != sim::StallCause::kSwapIn && s.cause != sim::StallCause::kSwapOut))
      continue;
    const int m = view_.map_index(s.tensor);
    if (m < 0 || plan.decisions[static_cast<std::size_t>(m)].action != sim::Action::kSwap) continue;
    const bool out = s.cause == sim::StallCause::kSwapOut;
    const auto it = std::find_if(stalled.begin(), stalled.end(), [&](const auto& e) {
      return std::get<1>(e) == m && std::get<2>(e) == out;
    });
    if (it == stalled.end()) {
      stalled.emplace_back(s.end_ns - s.start_ns, m, out);
    } else {
      std::get<0>(*it) += s.end_ns - s.start_ns;
    }
  }
  std::stable_sort(stalled.begin(), stalled.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  if (stalled.size() > count) stalled.resize(count);
  std::vector<Move> out;
  for (const auto& [ns, m, swap_out] : stalled) {
    const sim::Decision& d = plan.decisions[static_cast<std::size_t>(m)];
    const sim::OpId last_forward = prefetch_window(m).first;
    const sim::OpId prefetch =
        d.prefetch_before != sim::kNoOp ? d.prefetch_before : default_prefetch(m);
    for (const double share : {0.5, 1.0}) {
      const auto want = static_cast<sim::Nanoseconds>(share * static_cast<double>(ns));
      if (swap_out) {
        if (!release_points_) break;
        // Later by `want` of the ops' time, no later than the prefetch point.
        const sim::OpId at = later_by(
            d.release_before != sim::kNoOp ? d.release_before : last_forward + 1, prefetch, want);
        if (at == d.release_before || at <= last_forward) continue;
        Change c = map_change(static_cast<std::size_t>(m), sim::Action::kSwap, sim::Encoding::kNone,
                              d.prefetch_before);
        c.release_before = at;
        if (out.empty() || out.back().front() != c) out.push_back({c});
      } else {
        // Earlier by `want` of the ops' time, after the last forward use.
        const sim::OpId at = earlier_by(prefetch, last_forward, want);
        if (at == prefetch) continue;
        Change c = map_change(static_cast<std::size_t>(m), sim::Action::kSwap, sim::Encoding::kNone,
                              at == default_prefetch(m) ? sim::kNoOp : at);
        if (d.release_before <= at) c.release_before = d.release_before;  // still valid
        if (out.empty() || out.back().front() != c) out.push_back({c});
      }
    }
  }
  return out;
}

// The first op from `from` on (at most `limit`) that the ops from `from` before it take `ns` to
// run to: a point `ns` of the ops' time later.
sim::OpId Neighbourhood::later_by(sim::OpId from, sim::OpId limit, sim::Nanoseconds ns) const {
  sim::OpId at = from;
  for (sim::Nanoseconds covered = 0; at < limit && covered < ns; ++at)
    covered += view_.workload().op(at).duration_ns;
  return at;
}
// The last op before `from` (after `after`, else `from`) from which the ops up to `from` take
// `ns` to run: a point `ns` of the ops' time earlier.
sim::OpId Neighbourhood::earlier_by(sim::OpId from, sim::OpId after, sim::Nanoseconds ns) const {
  sim::OpId at = from;
  for (sim::Nanoseconds covered = 0; at - 1 > after && covered < ns;) {
    --at;
    covered += view_.workload().op(at).duration_ns;
  }
  return at;
}

// Whether the placement variable is on in `plan`.
bool Neighbourhood::placed(const sim::Plan& plan, Placement placement) const {
  if (placement == Placement::kUpdate) return plan.host_update;
  return any_placed(plan, placement == Placement::kParameters ? sim::TensorKind::kParameter
                                                              : sim::TensorKind::kInput);
}

// Whether `plan` places some tensor of `kind` on the host.
bool Neighbourhood::any_placed(const sim::Plan& plan, sim::TensorKind kind) const {
  const sim::Workload& w = view_.workload();
  return std::any_of(plan.host_tensors.begin(), plan.host_tensors.end(),
                     [&](sim::TensorId t) { return w.tensor(t).kind == kind; });
}

// A map's prefetch points lie in (last forward use, first backward use].
std::pair<sim::OpId, sim::OpId> Neighbourhood::prefetch_window(int m) const {
  const sim::FeatureMap& fm = view_.feature_maps()[static_cast<std::size_t>(m)];
  return {fm.forward_uses.empty() ? view_.producer(m) : fm.forward_uses.back(),
          fm.backward_uses.front()};
}
// Where the lowering issues a prefetch that names no point (sim::Decision::prefetch_before).
sim::OpId Neighbourhood::default_prefetch(int m) const {
  return sim::default_prefetch_point(view_.feature_maps()[static_cast<std::size_t>(m)],
                                     view_.workload());
}

Change Neighbourhood::map_change(std::size_t m, sim::Action action, sim::Encoding encoding,
                                 sim::OpId prefetch_before) {
  Change c;
  c.variable = c.map = static_cast<int>(m);
  c.action = action;
  c.encoding = encoding;
  c.prefetch_before = prefetch_before;
  return c;
}
std::int32_t Neighbourhood::chosen_algorithm(const sim::Plan& plan, sim::OpId op) {
  for (const sim::AlgorithmChoice& a : plan.algorithms) {
    if (a.op == op) return a.algorithm;
  }
  return -1;
}

sim::Plan with_move(const sim::Plan& plan, const Move& move, const Neighbourhood& neighbourhood) {
  const sim::Workload& w = neighbourhood.workload();
  sim::Plan result = plan;
  bool placed = false;
  for (const Change& c : move) {
    if (c.placement != Placement::kNone) {
      neighbourhood.apply(result, c.placement, c.on, c.at_use, c.stay);
      placed = true;
      continue;
    }
    if (c.state != sim::kNoTensor) {  // host_tensors stay ascending
      auto& host = result.host_tensors;
      const auto it = std::lower_bound(host.begin(), host.end(), c.state);
      const bool there = it != host.end() && *it == c.state;
      if (c.on && !there) host.insert(it, c.state);
      if (!c.on && there) host.erase(it);
      placed = true;
      continue;
    }
    if (c.host_tensor != sim::kNoTensor) {  // the entries stay in ascending (tensor, first use)
      auto& prefetches = result.host_prefetches;
      auto it = Neighbourhood::find_host_prefetch(prefetches, c.host_tensor, c.first_use);
      if (it != prefetches.end() && it->tensor == c.host_tensor && it->first_use == c.first_use)
        it = prefetches.erase(it);
      if (c.prefetch_before != sim::kNoOp)
        prefetches.insert(it, {c.host_tensor, c.first_use, c.prefetch_before});
      continue;
    }
    if (c.map < 0) {  // an algorithm: the choices stay in ascending op order
      auto& choices = result.algorithms;
      auto it =
          std::lower_bound(choices.begin(), choices.end(), c.op,
                           [](const sim::AlgorithmChoice& a, sim::OpId op) { return a.op < op; });
      if (it != choices.end() && it->op == c.op) it = choices.erase(it);
      if (c.algorithm >= 0) choices.insert(it, {c.op, c.algorithm});
      continue;
    }
    sim::Decision& d = result.decisions[static_cast<std::size_t>(c.map)];
    d.action = c.action;
    d.encoding = c.encoding;
    d.prefetch_before = c.prefetch_before;
    d.release_before = c.release_before;
    d.per_use = false;  // a change of action or prefetch point: recompute per segment by default
  }
  // A placement changed along with a host group's prefetch point: the group may be gone.
  if (placed) sim::drop_stale_host_prefetches(result, w);
  return result;
}

// How much the incumbent's timeline blames each variable: a map for the stalls waiting for it,
// plus a large weight for being resident (kept) where memory ran out; an op's algorithm for
// being the op where memory ran out; a host group's prefetch point for the stalls waiting for its
// copy, plus a large weight when the copy was resident ahead of its first use where memory ran
// out.
std::vector<double> blame(const sim::Timeline& timeline, const NetworkView& view,
                          const Neighbourhood& neighbourhood, const sim::Plan& plan) {
  std::vector<double> score(neighbourhood.variable_count(), 1.0);
  for (const sim::Stall& s : timeline.stalls) {
    if (s.tensor == sim::kNoTensor) continue;
    const int m = view.map_index(s.tensor);
    if (m >= 0) score[static_cast<std::size_t>(m)] += static_cast<double>(s.end_ns - s.start_ns);
  }
  if (timeline.oom && timeline.oom->op != sim::kNoOp) {
    const sim::OpId at = timeline.oom->op;
    for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
      const sim::FeatureMap& fm = view.feature_maps()[m];
      if (plan.decisions[m].action == sim::Action::kKeep &&
          view.producer(static_cast<int>(m)) < at && fm.backward_uses.back() >= at) {
        score[m] += 1e9 + static_cast<double>(view.map_bytes(static_cast<int>(m)));
      }
    }
    const std::vector<sim::OpId>& ops = neighbourhood.algorithm_ops();
    const auto it = std::lower_bound(ops.begin(), ops.end(), at);
    if (it != ops.end() && *it == at)
      score[plan.decisions.size() + static_cast<std::size_t>(it - ops.begin())] += 1e9;
  }
  if (timeline.oom) {  // moving a whole kind of tensors off the device is a candidate too
    for (std::size_t k = 0; k < kPlacementCount; ++k)
      score[plan.decisions.size() + neighbourhood.algorithm_ops().size() + k] += 1e9;
  }
  neighbourhood.blame_host_groups(timeline, plan, score);
  neighbourhood.blame_states(timeline, plan, score);
  return score;
}

namespace {

// Changes are grouped by variable, in order: the index where each group begins, and the end.
std::vector<std::size_t> variable_groups(const std::vector<Change>& changes) {
  std::vector<std::size_t> begins;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    if (i == 0 || changes[i].variable != changes[i - 1].variable) begins.push_back(i);
  }
  begins.push_back(changes.size());
  return begins;
}

}  // namespace

// How many moves combine `k` changes to `k` different variables: the k-th elementary symmetric
// polynomial of the maps' change counts (a double: it only meets a cap).
double combination_count(const std::vector<Change>& changes, int k) {
  const std::vector<std::size_t> groups = variable_groups(changes);
  std::vector<double> e(static_cast<std::size_t>(k) + 1, 0.0);
  e[0] = 1.0;
  for (std::size_t g = 0; g + 1 < groups.size(); ++g) {
    const auto n = static_cast<double>(groups[g + 1] - groups[g]);
    for (std::size_t j = e.size() - 1; j > 0; --j) e[j] += e[j - 1] * n;
  }
  return e.back();
}

// Every move of `k` changes to `k` different variables, in a fixed order.
std::vector<Move> combinations(const std::vector<Change>& changes, int k) {
  const std::vector<std::size_t> groups = variable_groups(changes);
  std::vector<Move> out;
  Move current;
  auto extend = [&](auto&& self, std::size_t from_group) -> void {
    if (current.size() == static_cast<std::size_t>(k)) {
      out.push_back(current);
      return;
    }
    for (std::size_t g = from_group; g + 1 < groups.size(); ++g) {
      for (std::size_t i = groups[g]; i < groups[g + 1]; ++i) {
        current.push_back(changes[i]);
        self(self, g + 1);
        current.pop_back();
      }
    }
  };
  extend(extend, 0);
  return out;
}

// Draws `count` moves: singles when `pairs` is false, else pairs; weighted by blame.
std::vector<Move> draw(const std::vector<Change>& changes, const std::vector<double>& map_blame,
                       std::size_t count, bool pairs, std::mt19937_64& rng) {
  std::vector<Move> moves;
  if (changes.empty()) return moves;
  if (!pairs && changes.size() <= count) {
    for (const Change& c : changes) moves.push_back({c});
    return moves;
  }
  std::vector<double> weights;
  weights.reserve(changes.size());
  for (const Change& c : changes)
    weights.push_back(map_blame[static_cast<std::size_t>(c.variable)]);
  if (!pairs) {
    // Singles without replacement (Efraimidis and Spirakis: the `count` largest keys u^(1/w),
    // as log(u) / w): a batch evaluates no change twice, where one map's stalls used to draw
    // its few changes over and over (MobileNetV2 b128 at 25%: one map, 52 of 75 ms of stalls).
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<std::pair<double, std::size_t>> keys;
    keys.reserve(changes.size());
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const double u = std::max(unit(rng), std::numeric_limits<double>::min());
      keys.emplace_back(std::log(u) / std::max(weights[i], 1e-300), i);
    }
    std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(count), keys.end(),
                      [](const auto& a, const auto& b) {
                        return a.first != b.first ? a.first > b.first : a.second < b.second;
                      });
    for (std::size_t i = 0; i < count; ++i) moves.push_back({changes[keys[i].second]});
    return moves;
  }
  std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
  std::uniform_int_distribution<std::size_t> any(0, changes.size() - 1);
  for (std::size_t i = 0; i < count; ++i) {
    Move move{changes[pick(rng)]};
    if (pairs) {
      const Change& second = changes[any(rng)];
      if (second.variable != move.front().variable) move.push_back(second);
    }
    moves.push_back(std::move(move));
  }
  return moves;
}

}  // namespace memplan::search::engine
