// The ops of a step that run beside its compute stream (Note [Device time] in step_units.hpp):
// each collective, with its sim::Collective and its kernels' recorded time, on the collective
// library's stream; and what a unit ran on another stream than the compute stream, an op of its
// own on that stream, without tensors (the profiler records none of it).
#include <algorithm>
#include <string>
#include <utility>

#include <fmt/core.h>

#include "importers/kineto/collective_units.hpp"
#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

sim::Phase StepBuilder::current_phase() const {
  return last_op_ == sim::kNoOp ? sim::Phase::kForward : workload_.ops[index(last_op_)].phase;
}

sim::OpId StepBuilder::add_stream_op(std::string name, sim::LayerType layer, std::int32_t stream,
                                     sim::Nanoseconds duration, sim::Nanoseconds launch) {
  sim::Op o;
  o.id = sim::op_id(workload_.ops.size());
  o.name = std::move(name);
  o.layer = std::move(layer);
  o.phase = current_phase();
  o.stream = stream;
  o.duration_ns = duration;
  workload_.ops.push_back(std::move(o));
  launch_.push_back(launch);
  return workload_.ops.back().id;
}

void StepBuilder::build_collective(Unit& unit) {
  const std::int32_t world = trace_.distributed ? trace_.distributed->world_size : std::int32_t{1};
  sim::Collective c = describe_collective(trace_, nesting_, unit, world);
  c.sequence = group_calls_[c.group]++;
  const std::string kind(sim::to_string(c.kind));
  const sim::OpId o =
      add_stream_op(fmt::format("{}_{}", kind, ++layer_counts_[kind]), sim::LayerType::named(kind),
                    unit.stream, unit.device_ns, unit.first_launch.value_or(event(unit).start_ns));
  report_.collectives += 1;
  report_.collective_bytes += std::max(c.in_bytes, c.out_bytes);
  report_.collective_recorded_ns += unit.device_ns;
  op(o).collective = std::move(c);
  unit.op = o;
}

void StepBuilder::add_side_ops(const Unit& unit) {
  if (unit.side_ns.empty()) return;
  // Named after its unit's op, or the op a folded unit's compute time went to.
  const sim::OpId owner = unit.op != sim::kNoOp ? unit.op : last_op_;
  const std::string base = owner != sim::kNoOp ? op(owner).name : std::string("step");
  for (const auto& [stream, ns] : unit.side_ns) {
    std::string name = fmt::format("{}.stream{}", base, streams_.raw[stream]);
    if (const int seen = layer_counts_[name]++; seen > 0) name += fmt::format("_{}", seen + 1);
    add_stream_op(std::move(name), sim::LayerType::named("side_stream"), stream, ns,
                  unit.first_launch_on.at(stream));
    ++report_.side_stream_ops;
  }
}

}  // namespace memplan::importers::detail
