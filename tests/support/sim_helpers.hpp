#pragma once
// Helpers for tests of the simulator: plans by tensor name, one-call simulation, and lookups of
// spans by label so that golden timelines read like the hand calculation.
#include <string>
#include <utility>
#include <vector>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "sim/simulation.hpp"

namespace memplan::test {

struct MapChoice {
  MapChoice(std::string tensor_name, sim::Action what, sim::Encoding scheme = sim::Encoding::kNone,
            std::string prefetch_op = {}, std::string release_op = {})
      : tensor(std::move(tensor_name)),
        action(what),
        encoding(scheme),
        prefetch_before(std::move(prefetch_op)),
        release_before(std::move(release_op)) {}
  std::string tensor;
  sim::Action action = sim::Action::kKeep;
  sim::Encoding encoding = sim::Encoding::kNone;
  std::string prefetch_before;  // op name; empty for the default
  std::string release_before;   // op name; empty for the default (Note [Release point])
};

/// In-core plan with the given maps changed; validated.
sim::Plan plan_with(const sim::Workload& w, const std::vector<MapChoice>& choices);

/// ZeRO-Offload's plan: in core, but gradients and optimizer state on the host and the update
/// there.
sim::Plan zero_offload_plan(const sim::Workload& w);

/// A machine with the given bandwidth in both directions (bytes per second), latency and memory.
sim::Machine test_machine(sim::Bytes memory_bytes, double bytes_per_s = 1e9,
                          sim::Nanoseconds latency_ns = 0);

/// The device of `w` (make_machine) with room for `kept` / `of` of its feature-map bytes: its
/// in-core peak less the rest of them ("60 / 40 / 25% of the feature-map bytes").
sim::Machine keeping_maps(const sim::Workload& w, sim::Bytes kept, sim::Bytes of);

using Simulation = sim::Simulation;

/// The sum of every op's duration: a step's device time with nothing overlapped or stalled.
inline sim::Nanoseconds op_time(const sim::Workload& w) {
  sim::Nanoseconds total = 0;
  for (const sim::Op& op : w.ops) total += op.duration_ns;
  return total;
}

/// A device memory no small scenario fills.
inline constexpr sim::Bytes kPlenty = sim::Bytes{1} << 30;
/// sim::simulate with every record kept.
Simulation simulate(const sim::Workload& w, const sim::Plan& plan, const sim::Machine& machine);

/// [start, end] of the span labelled `label` (instruction_label) on `stream`; the `nth` such span.
std::pair<sim::Nanoseconds, sim::Nanoseconds> span_of(const Simulation& s, const sim::Workload& w,
                                                      sim::StreamId stream,
                                                      const std::string& label, int nth = 0);
/// Labels of the timed instructions of a stream, in order.
std::vector<std::string> span_labels(const Simulation& s, const sim::Workload& w,
                                     sim::StreamId stream);

}  // namespace memplan::test
