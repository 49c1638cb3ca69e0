#include "tests/support/sim_helpers.hpp"

#include <stdexcept>

#include "core/feature_maps.hpp"
#include "core/liveness.hpp"

namespace memplan::test {

using namespace memplan::sim;

Plan plan_with(const Workload& w, const std::vector<MapChoice>& choices) {
  Plan plan = in_core_plan(w);
  plan.policy = "test";
  for (const MapChoice& c : choices) {
    bool found = false;
    for (Decision& d : plan.decisions) {
      if (w.tensor(d.tensor).name != c.tensor) continue;
      d.action = c.action;
      d.encoding = c.encoding;
      for (const Op& op : w.ops) {
        if (!c.prefetch_before.empty() && op.name == c.prefetch_before) d.prefetch_before = op.id;
        if (!c.release_before.empty() && op.name == c.release_before) d.release_before = op.id;
      }
      found = true;
    }
    if (!found) throw std::logic_error("plan_with: no feature map " + c.tensor);
  }
  validate_plan(plan, w, "test plan");
  return plan;
}

Plan zero_offload_plan(const Workload& w) {
  Plan plan = in_core_plan(w);
  set_host_placement(plan, w, TensorKind::kGradient, true);
  set_host_placement(plan, w, TensorKind::kOptimizerState, true);
  plan.host_update = true;
  return plan;
}

Machine test_machine(Bytes memory_bytes, double bytes_per_s, Nanoseconds latency_ns) {
  Machine m;
  m.memory_bytes = memory_bytes;
  m.link.h2d_bytes_per_s = bytes_per_s;
  m.link.d2h_bytes_per_s = bytes_per_s;
  m.link.latency_ns = latency_ns;
  return m;
}

Machine keeping_maps(const Workload& w, Bytes kept, Bytes of) {
  Bytes maps = 0;
  for (const FeatureMap& fm : find_feature_maps(w)) maps += w.tensor(fm.tensor).bytes;
  MachineOverrides overrides;
  overrides.memory_bytes = incore_peak(w).bytes - maps * (of - kept) / of;
  return make_machine(w.device, overrides);
}

Simulation simulate(const Workload& w, const Plan& plan, const Machine& machine) {
  return sim::simulate_plan(w, plan, machine);
}

std::pair<Nanoseconds, Nanoseconds> span_of(const Simulation& s, const Workload& w, StreamId stream,
                                            const std::string& label, int nth) {
  for (const Span& span : s.timeline.spans) {
    if (span.stream != stream) continue;
    const Instruction& in = s.program.stream(stream)[static_cast<std::size_t>(span.index)];
    if (instruction_label(in, s.program, w) == label && nth-- == 0)
      return {span.start_ns, span.end_ns};
  }
  throw std::logic_error("no span " + label);
}

std::vector<std::string> span_labels(const Simulation& s, const Workload& w, StreamId stream) {
  std::vector<std::string> labels;
  for (const Span& span : s.timeline.spans) {
    if (span.stream != stream) continue;
    labels.push_back(instruction_label(
        s.program.stream(stream)[static_cast<std::size_t>(span.index)], s.program, w));
  }
  return labels;
}

}  // namespace memplan::test
