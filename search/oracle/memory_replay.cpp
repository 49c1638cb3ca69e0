#include "search/oracle/memory_replay.hpp"

namespace memplan::search {

// Note [Fitting without the clock]
// Every alloc and free of a Program is on the compute stream (core/program.hpp), so the device
// memory sees one sequence of calls whatever the timing, and the engine runs out of memory at the
// first allocation of that sequence the allocator refuses. Replaying the compute stream's allocs
// and frees through the same DeviceMemory therefore finds the same answer as the engine: the plan
// fits exactly when the replay does, and when it does not the refused allocation, and so the op,
// the bytes missing (DeviceMemory::shortfall, as device_oom_report takes them) and the reserved
// peak, are the engine's. The engine also fails a plan that runs out of host memory (a timed
// curve): only a plan the replay finds fitting can, so a refusal here is final. The replay is a
// small part of a simulation's cost (no events, no streams); the lowering is the rest.
void MemoryReplay::begin(const sim::Machine& machine, const sim::Program& program, Evaluation& e) {
  program_ = &program;
  memory_.reset(machine.allocator, machine.memory_bytes, machine.allocator_config);
  handles_.assign(program.buffers.size(), -1);
  e.feasible = true;
}

void MemoryReplay::resume(const MemoryReplay& at, const sim::Program& program, Evaluation& e) {
  program_ = &program;
  memory_ = at.memory_;
  handles_.assign(at.handles_.begin(), at.handles_.end());
  handles_.resize(program.buffers.size(), -1);
  e.feasible = true;
}

bool MemoryReplay::allocate(sim::BufferId buffer, sim::OpId op, Evaluation& e) {
  const sim::Bytes bytes = program_->buffers[index(buffer)].bytes;
  const auto placed = memory_.allocate(bytes);
  if (!placed) {
    e.feasible = false;
    e.oom_op = op;
    e.oom_bytes_missing = memory_.shortfall(bytes).missing;
    return false;
  }
  handles_[index(buffer)] = placed->handle;
  return true;
}

void MemoryReplay::release(sim::BufferId buffer) {
  memory_.release(handles_[index(buffer)]);
  handles_[index(buffer)] = -1;
}

bool MemoryReplay::replay(const std::vector<sim::Instruction>& stream, std::size_t begin,
                          std::size_t end, Evaluation& e) {
  for (std::size_t k = begin; k < end; ++k) {
    const sim::Instruction& in = stream[k];
    if (in.kind == sim::InstrKind::kAlloc) {
      if (!allocate(in.buffer, in.op, e)) return false;
    } else if (in.kind == sim::InstrKind::kFree) {
      release(in.buffer);
    }
  }
  return true;
}

}  // namespace memplan::search
