#pragma once
// What the importer's two stages that make tensors from the trace's allocations share (Note
// [Sizes from allocations] in allocation_sizes.cpp, Note [FSDP in a trace] in fsdp_steps.cpp): the
// op running at a time, the kind of a tensor an op of a phase makes, a lifetime_only tensor, the
// most a level of bytes reaches.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/workload.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_units.hpp"

namespace memplan::importers::detail {

// The step's compute-stream ops by the start of their events, in issue order.
struct OpClock {
  std::vector<std::pair<sim::Nanoseconds, sim::OpId>> starts;

  OpClock(const std::vector<Unit>& units, const KinetoTrace& trace, const sim::Workload& w) {
    for (const Unit& u : units) {
      if (u.op != sim::kNoOp && w.op(u.op).stream == 0 && !w.op(u.op).collective)
        starts.emplace_back(trace.cpu_events[u.event].start_ns, u.op);
    }
    std::stable_sort(starts.begin(), starts.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  [[nodiscard]] sim::OpId at(sim::Nanoseconds t) const {
    auto it = std::upper_bound(starts.begin(), starts.end(), t,
                               [](sim::Nanoseconds x, const auto& s) { return x < s.first; });
    return it == starts.begin() ? starts.front().second : std::prev(it)->second;
  }
  [[nodiscard]] sim::OpId first() const {
    return std::min_element(starts.begin(), starts.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->second;
  }
  [[nodiscard]] sim::OpId last() const {
    return std::max_element(starts.begin(), starts.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->second;
  }
};

/// The kind of a tensor an op of `phase` makes: an activation in forward, a gradient in backward,
/// workspace in the update.
sim::TensorKind kind_made_in(sim::Phase phase);

/// A lifetime_only tensor (core/workload.hpp) of `w`, an output of `producer` (kNoOp: none).
sim::TensorId add_lifetime_tensor(sim::Workload& w, std::string name, sim::TensorKind kind,
                                  sim::Bytes bytes, sim::OpId producer);

/// The most a level reaches from `start` as `changes` (time, +bytes or -bytes) apply in time
/// order, frees before allocations at one time.
sim::Bytes highest(std::vector<std::pair<sim::Nanoseconds, sim::Bytes>> changes, sim::Bytes start);

}  // namespace memplan::importers::detail
