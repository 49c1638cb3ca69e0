#include "search/oracle/evaluator.hpp"

#include <algorithm>
#include <limits>
#include <optional>

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
// Every alloc and free of a Program is on the compute stream (core/program.hpp), so the device
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

namespace {

// Replays the compute stream's allocations and frees in [begin, end), or up to the first
// allocation that does not fit.
void replay_range(MemoryReplay& replay, const std::vector<sim::Instruction>& stream,
                  std::size_t begin, std::size_t end, Evaluation& e) {
  for (std::size_t k = begin; k < end; ++k) {
    const sim::Instruction& in = stream[k];
    if (in.kind == sim::InstrKind::kAlloc) {
      if (!replay.allocate(in.buffer, in.op, e)) return;
    } else if (in.kind == sim::InstrKind::kFree) {
      replay.release(in.buffer);
    }
  }
}

}  // namespace

Evaluation Evaluator::replay_memory() {
  ++memory_checks_;
  Evaluation e;
  replay_.begin(machine_, program_, e);
  const auto& stream = program_.stream(sim::StreamId::kCompute);
  replay_range(replay_, stream, 0, stream.size(), e);
  replay_.end(e);
  return e;
}

// Note [Resuming a memory check]
// PoocH's step 3 checks hundreds of plans that differ from the one it started from only by maps
// swapped there and recomputed here: their lowerings share the forward pass (Note [Resuming a
// lowering] in search/oracle/resumed_lowering.cpp), half the step. A MemoryCheckpoint keeps the
// starting plan's lowering where the backward pass starts and its allocation replay at the same
// point, so a check lowers and replays only the backward pass. The replay goes on from the copy
// when the resumed compute stream up to the backward pass is the checkpoint's plan's
// (ResumableLowerer::resume says so): the plan frees the same buffers there. A buffer made in the
// forward pass is freed there unless some later instruction reads it, and a plan whose backward
// pass reads a buffer the other's did not (a recomputation re-reading the input batch) frees it
// later; then the replay starts over. The lowering is resumed either way. The answer is
// check_memory's (tests/search/oracle/keep_check_test.cpp compares them).
void Evaluator::checkpoint(const sim::Plan& plan, MemoryCheckpoint& out) {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
  ++memory_checks_;
  lowerer_.lower(plan, program_, out.lowering_);
  out.replayed_ = false;
  if (out.lowering_.empty()) return;
  Evaluation e;
  replay_.begin(machine_, program_, e);
  replay_range(replay_, program_.stream(sim::StreamId::kCompute), 0, out.lowering_.placed_size(),
               e);
  out.replayed_ = e.feasible;
  out.replay_ = replay_;
  out.memory_bytes_ = machine_.memory_bytes;
  out.allocator_ = machine_.allocator;
}

Evaluation Evaluator::evaluate_if_fits(const sim::Plan& plan) {
  lower(plan);
  const Evaluation fit = replay_memory();
  return fit.feasible ? run_lowered() : fit;
}

const sim::Timeline* Evaluator::simulate_if_fits(const sim::Plan& plan, Evaluation* fit) {
  lower(plan);
  return run_if_fits(replay_memory(), fit);
}

const sim::Timeline* Evaluator::run_if_fits(const Evaluation& memory, Evaluation* fit) {
  if (fit != nullptr) *fit = memory;
  if (!memory.feasible) return nullptr;
  ++count_;
  return &engine_.run(program_, machine_, simulate_options());
}

Evaluation Evaluator::replay_memory(const MemoryCheckpoint& from, bool same_prefix) {
  ++memory_checks_;
  Evaluation e;
  const auto& stream = program_.stream(sim::StreamId::kCompute);
  if (same_prefix && from.replayed_ && from.memory_bytes_ == machine_.memory_bytes &&
      from.allocator_ == machine_.allocator) {
    ++resumed_replays_;
    replay_.resume(from.replay_, program_, e);
    replay_range(replay_, stream, from.lowering_.placed_size(), stream.size(), e);
  } else {
    replay_.begin(machine_, program_, e);
    replay_range(replay_, stream, 0, stream.size(), e);
  }
  replay_.end(e);
  return e;
}

std::optional<Evaluation> Evaluator::resume(const sim::Plan& plan, const MemoryCheckpoint& from) {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
  const ResumableLowerer::Resumption r = lowerer_.resume(plan, from.lowering_, program_);
  if (r.how == ResumableLowerer::Resumable::kNo) return std::nullopt;
  return replay_memory(from, r.same_prefix);
}

Evaluation Evaluator::check_memory(const sim::Plan& plan, const MemoryCheckpoint& from) {
  const std::optional<Evaluation> resumed = resume(plan, from);
  return resumed ? *resumed : check_memory(plan);
}

const sim::Timeline* Evaluator::simulate_if_fits(const sim::Plan& plan,
                                                 const MemoryCheckpoint& from, Evaluation* fit) {
  const std::optional<Evaluation> resumed = resume(plan, from);
  return resumed ? run_if_fits(*resumed, fit) : simulate_if_fits(plan, fit);
}

void MemoryReplay::resume(const MemoryReplay& at, const sim::Program& program, Evaluation& e) {
  program_ = &program;
  memory_ = at.memory_;
  handles_.assign(at.handles_.begin(), at.handles_.end());
  handles_.resize(program.buffers.size(), -1);
  e.feasible = true;
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
