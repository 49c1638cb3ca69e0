// DTR (Kirisame et al., ICLR 2021): Dynamic Tensor Rematerialization. When an allocation fails,
// evict the resident tensor with the smallest h(t) = cost(t) / (bytes(t) * staleness(t)), where
// cost is the time to recompute t plus that of its evicted neighbourhood (the evicted tensors its
// recomputation needs), and staleness the time since t was last used.
//
// Note [DTR frozen into a plan]
// DTR decides online. memplan runs it against the simulator: simulate; when memory runs out at
// op X (at in-core time t), score every kept feature map that is resident at X and not read by X
// itself, evict the one with the smallest h by turning it into recompute, and simulate again.
// The evictions so found are frozen into a plan. Times come from the in-core schedule.
#include <algorithm>
#include <limits>

#include <fmt/core.h>

#include "search/policy.hpp"
#include "search/schedule.hpp"

namespace memplan::search {
namespace {

// Recompute time of a map plus that of the evicted maps its producer reads, recursively.
sim::Nanoseconds neighbourhood_cost(const NetworkView& view, const sim::Plan& plan, int map,
                                    std::vector<char>& visited) {
  if (visited[static_cast<std::size_t>(map)] != 0) return 0;
  visited[static_cast<std::size_t>(map)] = 1;
  const sim::Op& producer = view.workload().op(view.producer(map));
  sim::Nanoseconds cost = producer.duration_ns;
  for (sim::TensorId t : producer.inputs) {
    const int m = view.map_index(t);
    if (m >= 0 && plan.decisions[static_cast<std::size_t>(m)].action == sim::Action::kRecompute) {
      cost += neighbourhood_cost(view, plan, m, visited);
    }
  }
  return cost;
}

}  // namespace

PolicyDecision decide_dtr(Evaluator& evaluator, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "dtr");
  const InCoreSchedule schedule = in_core_schedule(w);
  std::size_t evicted = 0;
  for (;;) {
    const Evaluation e = evaluator.evaluate(plan);
    if (e.feasible || e.oom_op == sim::kNoId) break;
    const sim::OpId at = e.oom_op;
    const sim::Nanoseconds now = schedule.start_ns[static_cast<std::size_t>(at)];
    const auto& reads = w.op(at).inputs;
    int victim = -1;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
      if (plan.decisions[m].action != sim::Action::kKeep) continue;
      const auto& fm = view.feature_maps()[m];
      if (view.producer(static_cast<int>(m)) >= at || fm.backward_uses.back() < at)
        continue;  // not resident
      if (std::find(reads.begin(), reads.end(), fm.tensor) != reads.end()) continue;  // in use
      std::vector<char> visited(plan.decisions.size(), 0);
      const auto cost =
          static_cast<double>(neighbourhood_cost(view, plan, static_cast<int>(m), visited));
      const sim::OpId touched = last_touch_before(view, static_cast<int>(m), at);
      const double staleness = static_cast<double>(
          std::max<sim::Nanoseconds>(1, now - schedule.end_ns[static_cast<std::size_t>(touched)]));
      const double h =
          cost / (static_cast<double>(view.map_bytes(static_cast<int>(m))) * staleness);
      if (h < best) {
        best = h;
        victim = static_cast<int>(m);
      }
    }
    if (victim < 0) break;
    plan.decisions[static_cast<std::size_t>(victim)].action = sim::Action::kRecompute;
    ++evicted;
  }
  std::string note = fmt::format("{} maps evicted for recomputation", evicted);
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
