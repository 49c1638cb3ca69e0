#include "search/schedule.hpp"

namespace memplan::search {

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
