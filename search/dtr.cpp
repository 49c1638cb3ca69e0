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

#include "search/policy.hpp"

namespace memplan::search {
namespace {

bool is_evicted(const sim::Plan& plan, int map) {
  return plan.decisions[static_cast<std::size_t>(map)].action == sim::Action::kRecompute;
}

}  // namespace

sim::Nanoseconds dtr_cost(const NetworkView& view, const sim::Plan& plan, int map) {
  const sim::Workload& w = view.workload();
  std::vector<char> visited(view.feature_maps().size(), 0);
  std::vector<int> stack{map};
  visited[static_cast<std::size_t>(map)] = 1;
  sim::Nanoseconds cost = 0;
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    cost += w.op(view.producer(m)).duration_ns;
    auto visit = [&](sim::TensorId t) {
      const int n = view.map_index(t);
      if (n < 0 || visited[static_cast<std::size_t>(n)] != 0 || !is_evicted(plan, n)) return;
      visited[static_cast<std::size_t>(n)] = 1;
      stack.push_back(n);
    };
    for (sim::TensorId t : w.op(view.producer(m)).inputs) visit(t);  // what regenerating m needs
    for (sim::OpId use : view.feature_maps()[static_cast<std::size_t>(m)].forward_uses) {
      for (sim::TensorId t : w.op(use).outputs) visit(t);  // what needs m to be regenerated
    }
  }
  return cost;
}

double dtr_score(const NetworkView& view, const sim::Plan& plan, const InCoreSchedule& schedule,
                 int map, sim::OpId at) {
  const sim::Nanoseconds now = schedule.start_ns[index(at)];
  const sim::OpId touched = last_touch_before(view, map, at);
  const double staleness =
      static_cast<double>(std::max<sim::Nanoseconds>(1, now - schedule.end_ns[index(touched)]));
  return static_cast<double>(dtr_cost(view, plan, map)) /
         (static_cast<double>(view.map_bytes(map)) * staleness);
}

namespace {

// The kept map resident at `at` (and not read by it) with the smallest h, or -1.
int dtr_victim(const NetworkView& view, const sim::Plan& plan, const InCoreSchedule& schedule,
               sim::OpId at) {
  const auto& reads = view.workload().op(at).inputs;
  int victim = -1;
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    if (plan.decisions[m].action != sim::Action::kKeep) continue;
    const auto& fm = view.feature_maps()[m];
    if (view.producer(static_cast<int>(m)) >= at || fm.backward_uses.back() < at)
      continue;                                                                     // not resident
    if (std::find(reads.begin(), reads.end(), fm.tensor) != reads.end()) continue;  // in use
    const double h = dtr_score(view, plan, schedule, static_cast<int>(m), at);
    if (h < best) {
      best = h;
      victim = static_cast<int>(m);
    }
  }
  return victim;
}

}  // namespace

PolicyDecision decide_dtr(Evaluator& evaluator, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "dtr");
  const InCoreSchedule schedule = in_core_schedule(view.workload());
  std::size_t evicted = 0;
  for (;;) {
    // Only where memory runs out is read: the allocations alone tell (Note [Fitting without
    // the clock] in evaluator.cpp).
    const Evaluation e = evaluator.check_memory(plan);
    if (e.feasible || e.oom_op == sim::kNoOp) break;
    // Evict at the op where memory ran out until the evicted bytes cover the bytes missing there
    // (Note [DTR frozen into a plan], batches), then simulate again.
    sim::Bytes freed = 0;
    std::size_t batch = 0;
    while (freed < std::max<sim::Bytes>(1, e.oom_bytes_missing)) {
      const int victim = dtr_victim(view, plan, schedule, e.oom_op);
      if (victim < 0) break;
      plan.decisions[static_cast<std::size_t>(victim)].action = sim::Action::kRecompute;
      freed += view.map_bytes(victim);
      ++batch;
    }
    if (batch == 0) break;
    evicted += batch;
  }
  std::string note = fmt::format("{} maps evicted for recomputation", evicted);
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
