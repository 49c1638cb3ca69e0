#include "search/policies/schedule.hpp"

#include <algorithm>

namespace memplan::search {

namespace {
// defer_releases tries at most this many maps one at a time (two simulations each).
constexpr std::size_t kDeferredOneByOne = 32;
}  // namespace

InCoreSchedule in_core_schedule(const sim::Workload& workload) {
  InCoreSchedule s;
  s.start_ns.reserve(workload.ops.size());
  s.end_ns.reserve(workload.ops.size());
  sim::Nanoseconds t = 0;
  for (const sim::Op& op : workload.ops) {
    s.start_ns.push_back(t);
    t += op.duration_ns;
    s.end_ns.push_back(t);
  }
  return s;
}

sim::Nanoseconds free_time(const NetworkView& view, const InCoreSchedule& schedule, int map) {
  const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(map)];
  const sim::OpId last_forward =
      fm.forward_uses.empty() ? view.producer(map) : fm.forward_uses.back();
  return schedule.start_ns[index(fm.backward_uses.front())] - schedule.end_ns[index(last_forward)];
}

sim::Nanoseconds swap_round_trip_ns(const NetworkView& view, const sim::Machine& machine, int map) {
  const sim::Bytes bytes = view.map_bytes(map);
  return machine.d2h_copy_ns(bytes) + machine.h2d_copy_ns(bytes);
}

std::vector<int> swapped_maps(const sim::Plan& plan) {
  std::vector<int> swapped;
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    if (plan.decisions[m].action == sim::Action::kSwap) swapped.push_back(static_cast<int>(m));
  }
  return swapped;
}

void place_releases(sim::Plan& plan, const NetworkView& view, const sim::Machine& machine) {
  const sim::Workload& w = view.workload();
  const InCoreSchedule schedule = in_core_schedule(w);
  // Copy-outs in the order the maps are written (decisions are in tensor id order).
  std::vector<int> swapped = swapped_maps(plan);
  std::stable_sort(swapped.begin(), swapped.end(),
                   [&](int a, int b) { return view.producer(a) < view.producer(b); });
  sim::Nanoseconds engine_free = 0;
  for (int m : swapped) {
    sim::Decision& d = plan.decisions[static_cast<std::size_t>(m)];
    const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(m)];
    const sim::Nanoseconds start =
        std::max(engine_free, schedule.end_ns[sim::index(view.producer(m))]);
    engine_free = start + machine.d2h_copy_ns(view.map_bytes(m));
    const sim::OpId last_forward = sim::last_forward_use(fm, w);
    const sim::OpId limit =
        d.prefetch_before != sim::kNoOp ? d.prefetch_before : sim::default_prefetch_point(fm, w);
    sim::OpId at = last_forward + 1;
    while (at < limit && schedule.start_ns[sim::index(at)] < engine_free) ++at;
    d.release_before = at == last_forward + 1 ? sim::kNoOp : at;
  }
}

namespace {
// adopt_if_faster's rule: `after` fits, and is faster than `before`, or as fast with less time
// stalled, or `before` does not fit.
bool better(const Evaluation& before, const Evaluation& after) {
  return after.feasible &&
         (!before.feasible || after.iteration_ns < before.iteration_ns ||
          (after.iteration_ns == before.iteration_ns && after.stall_ns < before.stall_ns));
}
}  // namespace

bool adopt_if_faster(Evaluator& evaluator, sim::Plan& plan, sim::Plan candidate) {
  if (candidate == plan) return false;
  if (!better(evaluator.cost(plan), evaluator.cost(candidate))) return false;
  plan = std::move(candidate);
  return true;
}

bool defer_releases(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan) {
  sim::Plan all = plan;
  place_releases(all, view, evaluator.machine());
  if (all == plan) return false;
  if (adopt_if_faster(evaluator, plan, all)) return true;
  // Deferring every release holds too much memory, or costs time elsewhere: one map at a time,
  // those whose copy-outs stall compute longest first.
  std::vector<std::pair<sim::Nanoseconds, int>> stalled;
  const sim::Timeline& timeline = evaluator.timeline(plan);
  Evaluation current = summarize(timeline);
  for (const sim::Stall& s : timeline.stalls) {
    const int m = s.tensor == sim::kNoTensor ? -1 : view.map_index(s.tensor);
    if (s.cause == sim::StallCause::kSwapOut && m >= 0)
      stalled.emplace_back(s.end_ns - s.start_ns, m);
  }
  std::sort(stalled.rbegin(), stalled.rend());
  bool moved = false;
  for (std::size_t k = 0; k < std::min(stalled.size(), kDeferredOneByOne); ++k) {
    const auto m = static_cast<std::size_t>(stalled[k].second);
    if (all.decisions[m].release_before == sim::kNoOp) continue;
    sim::Plan one = plan;
    one.decisions[m].release_before = all.decisions[m].release_before;
    if (one == plan) continue;
    const Evaluation e = evaluator.cost(one);
    if (!better(current, e)) continue;
    plan = std::move(one);
    current = e;
    moved = true;
  }
  return moved;
}

sim::OpId last_touch_before(const NetworkView& view, int map, sim::OpId op) {
  const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(map)];
  sim::OpId last = view.producer(map) < op ? view.producer(map) : sim::kNoOp;
  for (sim::OpId u : fm.forward_uses) {
    if (u < op) last = std::max(last, u);
  }
  for (sim::OpId u : fm.backward_uses) {
    if (u < op) last = std::max(last, u);
  }
  return last;
}

}  // namespace memplan::search
