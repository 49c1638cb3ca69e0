#pragma once
// Shared arithmetic for the policies that reason about when things happen in the step: the
// in-core schedule (ops back to back on the compute stream, as the simulator runs an in-core plan
// when nothing else waits) and when each feature map is used in it.
#include <vector>

#include "core/machine.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/network_view.hpp"

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

/// The maps (indices into its decisions) the plan swaps, ascending.
std::vector<int> swapped_maps(const sim::Plan& plan);

/// Release points for the plan's swapped maps (Note [Release point] in core/plan.hpp), where a
/// stream-ordered allocator would free them: before the first op that starts, in the in-core
/// schedule, once the map's copy-out has ended (copy-outs queue on the one device-to-host engine
/// in the order their maps are written), and no later than the map's prefetch point. A map whose
/// copy-out ends before the op after its last forward use starts keeps the default (freed there).
void place_releases(sim::Plan& plan, const NetworkView& view, const sim::Machine& machine);

/// Replaces `plan` by `candidate` when the candidate fits and is faster, or as fast with less time
/// stalled (a step the host's dispatch bounds hides the device's stalls from its time, but a
/// faster host would show them), or fits where the plan does not; returns whether it did.
bool adopt_if_faster(Evaluator& evaluator, sim::Plan& plan, sim::Plan candidate);

/// Moves the plan's releases to place_releases' points when the step then fits and is faster
/// (adopt_if_faster); else moves them one map at a time, the maps whose copy-outs stall compute
/// longest first, each kept when it fits and is faster. What a policy that frees through a
/// stream-ordered allocator (PoocH, Capuchin) does last.
bool defer_releases(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan);

/// The last op before `op` (in issue order) that reads or writes the map, or kNoOp.
sim::OpId last_touch_before(const NetworkView& view, int map, sim::OpId op);

}  // namespace memplan::search
