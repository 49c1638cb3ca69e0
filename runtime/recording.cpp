#include "runtime/recording.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "runtime/host_speed.hpp"
#include "runtime/interpreter.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::runtime {

namespace {

// Where the backend's library searched algorithms, the recorded step runs the fastest one: the
// op's workspace becomes that algorithm's, and the memory-optimal one its alternative.
void use_found_algorithms(sim::Workload& w, const std::map<sim::OpId, FoundAlgorithms>& found) {
  for (const auto& [id, f] : found) {
    sim::Op& op = w.ops.at(index(id));
    op.workspace_bytes = f.fastest.workspace_bytes;
    op.algorithms.clear();
    if (f.memory_optimal.workspace_bytes < f.fastest.workspace_bytes) {
      op.algorithms.push_back({"memory_optimal", f.memory_optimal.workspace_bytes, 0});
    }
  }
}

// What the recorded iterations measured: each one's time, and per op its time in each.
struct Measurements {
  std::vector<sim::Nanoseconds> iteration_ns;
  std::vector<std::vector<sim::Nanoseconds>> op_ns;
};

Measurements measure(const Backend& backend, const sim::Workload& w, const sim::Program& program,
                     sim::Bytes capacity, const RecordOptions& options, int recorded) {
  const std::unique_ptr<Device> device =
      backend.make_device(capacity, options.seed, sim::AllocatorModel::kArena);
  device->set_capture(false);
  const auto& compute = program.stream(sim::StreamId::kCompute);
  Measurements m;
  m.op_ns.resize(w.ops.size());
  for (int k = 0; k < std::max(options.warmup, 0) + recorded; ++k) {
    const sim::Timeline measured = run_program(*device, w, program);
    if (!measured.feasible) {
      // The device has the capacity at which the simulator, with the same arena, runs the
      // in-core step: running out means the backend and the simulator disagree, a bug.
      throw std::logic_error(
          fmt::format("recording on {}: the in-core run did not fit in the {} bytes the "
                      "simulator says it needs",
                      backend.name(), capacity));
    }
    if (k < std::max(options.warmup, 0)) continue;
    m.iteration_ns.push_back(measured.iteration_ns);
    std::vector<sim::Nanoseconds> this_run(w.ops.size(), 0);
    for (const sim::Span& span : measured.spans) {
      if (span.stream != sim::StreamId::kCompute) continue;
      const sim::Instruction& in = compute[static_cast<std::size_t>(span.index)];
      if (in.kind != sim::InstrKind::kRun) continue;
      this_run[index(in.op)] += span.end_ns - span.start_ns;
    }
    for (std::size_t o = 0; o < w.ops.size(); ++o) m.op_ns[o].push_back(this_run[o]);
  }
  return m;
}

sim::Nanoseconds median(std::vector<sim::Nanoseconds> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each op's duration becomes its median; an alternative algorithm keeps the difference the
// library measured between it and the fastest.
void set_durations(sim::Workload& w, const std::map<sim::OpId, FoundAlgorithms>& found,
                   const Measurements& m) {
  for (std::size_t o = 0; o < w.ops.size(); ++o) {
    sim::Op& op = w.ops[o];
    op.duration_ns = std::max<sim::Nanoseconds>(median(m.op_ns[o]), 1);
    const auto f = found.find(op.id);
    for (sim::Algorithm& a : op.algorithms) {
      a.duration_ns = f == found.end() ? op.duration_ns
                                       : std::max<sim::Nanoseconds>(
                                             op.duration_ns + f->second.memory_optimal.duration_ns -
                                                 f->second.fastest.duration_ns,
                                             1);
    }
  }
}

}  // namespace

Recording record(const Backend& backend, const sim::Workload& workload,
                 const RecordOptions& options) {
  Recording r;
  r.workload = workload;
  sim::Workload& w = r.workload;
  const std::map<sim::OpId, FoundAlgorithms> found = backend.find_algorithms(workload);
  use_found_algorithms(w, found);
  const sim::Program program = sim::lower(w, sim::in_core_plan(w));
  r.peak_reserved_bytes = sim::capacity_to_run(program, sim::Machine{});

  const int recorded = std::max(options.iterations, 1);
  const Measurements m = measure(backend, w, program, r.peak_reserved_bytes, options, recorded);
  r.iteration_ns = median(m.iteration_ns);
  set_durations(w, found, m);

  r.link = backend.measure_link();
  w.device = sim::DeviceInfo{};
  w.device.name = backend.name();
  w.device.memory_bytes = r.peak_reserved_bytes;
  w.device.link = r.link;
  w.device.host_bandwidth_bytes_per_s = measure_host_op_bandwidth();
  const std::string what = workload.provenance.note;
  w.provenance = sim::Provenance{};
  w.provenance.source = "recorded";
  w.provenance.backend = backend.name();
  w.provenance.note = fmt::format(
      "{}{}recorded by memplan on the {} backend: {} warm-up iterations, then {} recorded "
      "(op times: the median over them; iteration {} ns; seed {})",
      what, what.empty() ? "" : "; ", backend.name(), std::max(options.warmup, 0), recorded,
      r.iteration_ns, options.seed);
  if (!found.empty()) {
    w.provenance.note += fmt::format(
        "; {} ops run the fastest algorithm the backend's library found, their memory_optimal "
        "alternative costs what it measured on top",
        found.size());
  }
  sim::validate(w, fmt::format("recording on {}", backend.name()));
  return r;
}

}  // namespace memplan::runtime
