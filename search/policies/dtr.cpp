// DTR (Kirisame et al., ICLR 2021): Dynamic Tensor Rematerialization. When an allocation fails,
// evict the resident tensor with the smallest h(t) = cost(t) / (bytes(t) * staleness(t)), where
// cost is the time to recompute t plus that of its evicted neighbourhood, and staleness the time
// since t was last used.
//
// Note [DTR frozen into a plan]
// DTR decides online. memplan runs it against the simulator: simulate; when memory runs out at
// op X (at in-core time t), score every kept feature map that is resident at X and not read by X
// itself, evict the one with the smallest h by turning it into recompute, and simulate again.
// The evictions so found are frozen into a plan. Times come from the in-core schedule.
// The evicted neighbourhood e*(t) is, as in the DTR paper, the evicted maps connected to t
// through evicted maps in either direction: those its recomputation needs (the evicted inputs of
// its producer, recursively) and those whose recomputation would need it once it is gone (the
// evicted outputs of forward ops that read it, recursively). Each counts its producer's time once.
// Batches: one simulation per eviction would make DTR quadratic in the number of maps (thousands
// of evictions on ResNet-1517, each a full simulation). When memory runs out at X with B bytes
// missing, DTR evicts victims chosen at X, one after another (the scores are recomputed after
// each, as the evicted neighbourhoods change), until their bytes add up to B, and only then
// simulates again. APPROXIMATION: this is the one-at-a-time answer whenever evicting maps that
// are resident at X lowers what X misses by at most their bytes and the next simulation would
// still run out at X while fewer than B bytes were evicted; the arena's coalescing can free a
// larger block than the bytes evicted, and an eviction moves the timeline, so the batch can evict
// a map or two more than the one-at-a-time loop would (docs/policies.md).
#include <algorithm>
#include <limits>

#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {
DtrCosts::DtrCosts(const NetworkView& view, const sim::Plan& plan)
    : view_(&view),
      parent_(view.feature_maps().size()),
      component_ns_(parent_.size(), 0),
      evicted_(parent_.size(), 0) {
  for (std::size_t m = 0; m < parent_.size(); ++m) parent_[m] = static_cast<int>(m);
  for (std::size_t m = 0; m < parent_.size(); ++m)
    if (plan.decisions[m].action == sim::Action::kRecompute) evict(static_cast<int>(m));
}

template <typename F>
void DtrCosts::for_each_neighbour(int map, F&& f) const {
  const sim::Workload& w = view_->workload();
  auto visit = [&](sim::TensorId t) {
    const int n = view_->map_index(t);
    if (n >= 0 && n != map) f(n);
  };
  for (sim::TensorId t : w.op(view_->producer(map)).inputs) visit(t);  // what regenerating it needs
  for (sim::OpId use : view_->feature_maps()[static_cast<std::size_t>(map)].forward_uses) {
    for (sim::TensorId t : w.op(use).outputs) visit(t);  // what needs it to be regenerated
  }
}

int DtrCosts::root(int map) {
  while (parent_[static_cast<std::size_t>(map)] != map) {
    auto& p = parent_[static_cast<std::size_t>(map)];
    p = parent_[static_cast<std::size_t>(p)];  // path halving
    map = p;
  }
  return map;
}

void DtrCosts::evict(int map) {
  if (evicted_[static_cast<std::size_t>(map)] != 0) return;
  evicted_[static_cast<std::size_t>(map)] = 1;
  component_ns_[static_cast<std::size_t>(map)] = producer_ns(map);
  for_each_neighbour(map, [&](int n) {
    if (evicted_[static_cast<std::size_t>(n)] == 0) return;
    const int a = root(map);
    const int b = root(n);
    if (a == b) return;
    parent_[static_cast<std::size_t>(b)] = a;
    component_ns_[static_cast<std::size_t>(a)] += component_ns_[static_cast<std::size_t>(b)];
  });
}

sim::Nanoseconds DtrCosts::cost(int map) {
  sim::Nanoseconds cost = producer_ns(map);
  roots_.clear();
  for_each_neighbour(map, [&](int n) {
    if (evicted_[static_cast<std::size_t>(n)] == 0) return;
    const int r = root(n);
    if (std::find(roots_.begin(), roots_.end(), r) != roots_.end()) return;
    roots_.push_back(r);
    cost += component_ns(r);
  });
  return cost;
}

sim::Nanoseconds DtrCosts::producer_ns(int map) const {
  return view_->workload().op(view_->producer(map)).duration_ns;
}

double dtr_score(const NetworkView& view, DtrCosts& costs, const InCoreSchedule& schedule, int map,
                 sim::OpId at) {
  const sim::Nanoseconds now = schedule.start_ns[index(at)];
  const sim::OpId touched = last_touch_before(view, map, at);
  const double staleness =
      static_cast<double>(std::max<sim::Nanoseconds>(1, now - schedule.end_ns[index(touched)]));
  return static_cast<double>(costs.cost(map)) /
         (static_cast<double>(view.map_bytes(map)) * staleness);
}

namespace {

// The kept maps resident at `at` (and not read by it), smallest h first: the victims of one batch
// (Note [DTR frozen into a plan]). Evicting a map only raises the others' costs (their evicted
// neighbourhoods grow), and at one op their bytes and staleness do not change, so the scores
// taken when the batch starts are lower bounds: the top of the heap is re-scored and is the
// victim when its score has not moved (lazy greedy), which is the scan of every map's current
// score with ties going to the lower map index.
class Victims {
 public:
  Victims(const NetworkView& view, const sim::Plan& plan, DtrCosts& costs,
          const InCoreSchedule& schedule, sim::OpId at)
      : view_(view), plan_(plan), costs_(costs), schedule_(schedule), at_(at) {
    const auto& reads = view.workload().op(at).inputs;
    for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
      if (plan.decisions[m].action != sim::Action::kKeep) continue;
      const auto& fm = view.feature_maps()[m];
      if (view.producer(static_cast<int>(m)) >= at || fm.backward_uses.back() < at)
        continue;  // not resident
      if (std::find(reads.begin(), reads.end(), fm.tensor) != reads.end()) continue;  // in use
      heap_.emplace_back(score(static_cast<int>(m)), static_cast<int>(m));
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }

  /// The map to evict next, or -1 when none is left.
  int next() {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      auto [h, m] = heap_.back();
      heap_.pop_back();
      if (plan_.decisions[static_cast<std::size_t>(m)].action != sim::Action::kKeep) continue;
      const double now = score(m);
      if (now == h) return m;
      heap_.emplace_back(now, m);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
    return -1;
  }

 private:
  double score(int m) { return dtr_score(view_, costs_, schedule_, m, at_); }

  const NetworkView& view_;
  const sim::Plan& plan_;
  DtrCosts& costs_;
  const InCoreSchedule& schedule_;
  sim::OpId at_;
  std::vector<std::pair<double, int>> heap_;  // (score when pushed, map), smallest on top
};

}  // namespace

PolicyDecision decide_dtr(Evaluator& evaluator, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "dtr");
  const InCoreSchedule schedule = in_core_schedule(view.workload());
  DtrCosts costs(view, plan);
  // Only where memory runs out is read, of plans that evict maps the all-kept plan keeps: the
  // oracle answers them from that plan's allocations (Note [One oracle] in
  // search/oracle/evaluator.cpp).
  const BaseScope based(evaluator, plan);
  std::vector<int> evicted;
  for (;;) {
    const Evaluation e = evaluator.fits(plan);
    if (e.feasible || e.oom_op == sim::kNoOp) break;
    // Evict at the op where memory ran out until the evicted bytes cover the bytes missing there
    // (Note [DTR frozen into a plan], batches), then simulate again.
    sim::Bytes freed = 0;
    std::size_t batch = 0;
    Victims victims(view, plan, costs, schedule, e.oom_op);
    while (freed < std::max<sim::Bytes>(1, e.oom_bytes_missing)) {
      const int victim = victims.next();
      if (victim < 0) break;
      plan.decisions[static_cast<std::size_t>(victim)].action = sim::Action::kRecompute;
      costs.evict(victim);
      evicted.push_back(victim);
      freed += view.map_bytes(victim);
      ++batch;
    }
    if (batch == 0) break;
  }
  std::string note = fmt::format("{} maps evicted for recomputation", evicted.size());
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
