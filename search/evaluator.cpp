#include "search/evaluator.hpp"

#include <algorithm>
#include <limits>

namespace memplan::search {

Evaluator::Evaluator(const sim::Workload& workload, const sim::Machine& machine)
    : workload_(&workload), machine_(machine), lowerer_(workload) {}

namespace {
// simulate()'s: the stalls with the tensor they wait for, no spans or memory curve.
sim::EngineOptions simulate_options() {
  sim::EngineOptions options;
  options.record_spans = false;
  options.record_memory = false;
  return options;
}
}  // namespace

Evaluation summarize(const sim::Timeline& timeline) {
  Evaluation e;
  e.feasible = timeline.feasible;
  e.iteration_ns = timeline.iteration_ns;
  e.peak_bytes = timeline.peak_bytes;
  e.peak_reserved_bytes = timeline.peak_reserved_bytes;
  e.stall_ns = timeline.stall_ns();
  if (timeline.oom) {
    e.oom_op = timeline.oom->op;
    e.oom_bytes_missing = timeline.oom->bytes_missing;
  }
  return e;
}

void Evaluator::lower(const sim::Plan& plan) {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
  lowerer_.lower(plan, program_);
}

Evaluation Evaluator::evaluate(const sim::Plan& plan) {
  lower(plan);
  return run_lowered();
}

Evaluation Evaluator::run_lowered() {
  ++count_;
  sim::EngineOptions options;
  options.record_spans = false;
  options.record_memory = false;
  options.record_stalls = false;
  Evaluation e = summarize(engine_.run(program_, machine_, options));
  if (!e.feasible && measure_excess_) {
    sim::Machine unlimited = machine_;
    unlimited.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
    const sim::Timeline& t = engine_.run(program_, unlimited, options);
    e.excess_bytes = std::max<sim::Bytes>(1, t.peak_reserved_bytes - machine_.memory_bytes);
  }
  return e;
}

// Note [Fitting without the clock]
// Every alloc and free of a Program is on the compute stream (sim/program.hpp), so the device
// memory sees one sequence of calls whatever the timing, and the engine runs out of memory at the
// first allocation of that sequence the allocator refuses. Replaying the compute stream's allocs
// and frees through the same DeviceMemory therefore finds the same answer as the engine: the plan
// fits exactly when the replay does, and when it does not the refused allocation, and so the op,
// the bytes missing (its aligned request minus the largest free block, as device_oom_report
// computes them) and the reserved peak, are the engine's. The engine also fails a plan that runs
// out of host memory (a timed curve): only a plan the replay finds fitting can, so a refusal here
// is final. The replay is a small part of a simulation's cost (no events, no streams); the
// lowering is the rest.
Evaluation Evaluator::check_memory(const sim::Plan& plan) {
  lower(plan);
  return replay_memory();
}

Evaluation Evaluator::replay_memory() {
  ++memory_checks_;
  Evaluation e;
  replay_.begin(machine_, program_, e);
  for (const sim::Instruction& in : program_.stream(sim::StreamId::kCompute)) {
    if (in.kind == sim::InstrKind::kAlloc) {
      if (!replay_.allocate(in.buffer, in.op, e)) break;
    } else if (in.kind == sim::InstrKind::kFree) {
      replay_.release(in.buffer);
    }
  }
  replay_.end(e);
  return e;
}

Evaluation Evaluator::evaluate_if_fits(const sim::Plan& plan) {
  lower(plan);
  const Evaluation fit = replay_memory();
  return fit.feasible ? run_lowered() : fit;
}

const sim::Timeline* Evaluator::simulate_if_fits(const sim::Plan& plan, Evaluation* fit) {
  lower(plan);
  const Evaluation e = replay_memory();
  if (fit != nullptr) *fit = e;
  if (!e.feasible) return nullptr;
  ++count_;
  return &engine_.run(program_, machine_, simulate_options());
}

void MemoryReplay::begin(const sim::Machine& machine, const sim::Program& program, Evaluation& e) {
  program_ = &program;
  memory_.reset(machine.allocator, machine.memory_bytes);
  handles_.assign(program.buffers.size(), -1);
  e.feasible = true;
}

bool MemoryReplay::allocate(sim::BufferId buffer, sim::OpId op, Evaluation& e) {
  const sim::Bytes bytes = program_->buffers[index(buffer)].bytes;
  const auto placed = memory_.allocate(bytes);
  if (!placed) {
    e.feasible = false;
    e.oom_op = op;
    e.oom_bytes_missing = sim::DeviceArena::aligned_size(bytes) - memory_.largest_free_block();
    return false;
  }
  handles_[index(buffer)] = placed->handle;
  return true;
}

void MemoryReplay::release(sim::BufferId buffer) {
  memory_.release(handles_[index(buffer)]);
  handles_[index(buffer)] = -1;
}

const sim::Timeline& Evaluator::simulate(const sim::Plan& plan) {
  lower(plan);
  ++count_;
  return engine_.run(program_, machine_, simulate_options());
}

}  // namespace memplan::search
