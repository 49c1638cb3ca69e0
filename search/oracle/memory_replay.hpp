#pragma once
// MemoryReplay: a lowered plan's allocations and frees replayed through the machine's DeviceMemory
// with no clock (Note [Fitting without the clock] in memory_replay.cpp). Every alloc and free of a
// Program is on the compute stream, so this finds where the engine runs out of device memory,
// and by how much, without the engine. The oracle's ways of answering Evaluator::fits (a full
// lowering, a resumed one, KeepCheck, EvictionCheck) all end in one.
#include <cstddef>
#include <vector>

#include "core/machine.hpp"
#include "core/program.hpp"
#include "memory/device_memory.hpp"
#include "search/oracle/evaluation.hpp"

namespace memplan::search {

/// One allocation or free of a lowered plan's compute stream: what the incremental checks
/// (KeepCheck, EvictionCheck) keep of a base plan and replay.
struct MemoryOp {
  sim::BufferId buffer;
  sim::OpId op;
  bool alloc;
};

class MemoryReplay {
 public:
  /// An empty device memory of `machine` for the buffers of `program` (which must outlive the
  /// replay); `e` is set feasible.
  void begin(const sim::Machine& machine, const sim::Program& program, Evaluation& e);
  /// Goes on from a copy of `at`, a replay of another program that `program` shares a prefix
  /// with (a checkpoint's); `e` is set feasible.
  void resume(const MemoryReplay& at, const sim::Program& program, Evaluation& e);
  /// Allocates `buffer` for `op`; false when it does not fit, with `e`'s feasible, oom_op and
  /// oom_bytes_missing then the engine's.
  bool allocate(sim::BufferId buffer, sim::OpId op, Evaluation& e);
  /// Frees the block `buffer` holds.
  void release(sim::BufferId buffer);
  /// The compute stream's allocations and frees at positions [begin, end) of `stream`, or up to
  /// the first allocation that does not fit; returns whether everything fit.
  bool replay(const std::vector<sim::Instruction>& stream, std::size_t begin, std::size_t end,
              Evaluation& e);
  /// Sets `e.peak_reserved_bytes` once the replay is over.
  void end(Evaluation& e) const { e.peak_reserved_bytes = memory_.peak_reserved_bytes(); }

 private:
  const sim::Program* program_ = nullptr;
  sim::DeviceMemory memory_;
  std::vector<sim::DeviceMemory::Handle> handles_;  // per buffer
};

}  // namespace memplan::search
