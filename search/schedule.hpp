#pragma once
// Shared arithmetic for the policies that reason about when things happen in the step: the
// in-core schedule (ops back to back on the compute stream, as the simulator runs an in-core plan
// when nothing else waits) and when each feature map is used in it.
#include <vector>

#include "search/network_view.hpp"
#include "sim/machine.hpp"

namespace memplan::search {

struct InCoreSchedule {
  std::vector<sim::Nanoseconds> start_ns;  // per op
  std::vector<sim::Nanoseconds> end_ns;    // per op
};

InCoreSchedule in_core_schedule(const sim::Workload& workload);

/// Time between the end of a map's last forward use and the start of its first backward use in
/// the in-core schedule: how long a swap has to hide in (Capuchin's "free time").
sim::Nanoseconds free_time(const NetworkView& view, const InCoreSchedule& schedule, int map);

/// Cost of copying a map out and back in on this machine.
sim::Nanoseconds swap_round_trip_ns(const NetworkView& view, const sim::Machine& machine, int map);

/// The last op before `op` (in issue order) that reads or writes the map, or kNoOp.
sim::OpId last_touch_before(const NetworkView& view, int map, sim::OpId op);

}  // namespace memplan::search
