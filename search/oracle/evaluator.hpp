#pragma once
// Evaluator: the simulator as an oracle for policies and the search — lower a Plan, run it on the
// Machine, return what it costs. It owns its Lowerer, Program and Engine (and so their buffers),
// which makes repeated evaluation cheap; use one Evaluator per thread.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "memory/device_memory.hpp"
#include "search/oracle/resumed_lowering.hpp"
#include "sim/engine.hpp"

namespace memplan::search {

struct Evaluation {
  bool feasible = false;
  sim::Nanoseconds iteration_ns = 0;
  sim::Bytes peak_bytes = 0;
  sim::Bytes peak_reserved_bytes = 0;
  sim::Nanoseconds stall_ns = 0;
  sim::OpId oom_op = sim::kNoOp;  // where memory ran out, when it did
  sim::Bytes oom_bytes_missing = 0;
  /// For a plan that does not fit, when the Evaluator measures it (Evaluator::measure_excess):
  /// its peak arena end on a device without a memory limit, minus the capacity. Zero exactly
  /// when the plan fits (Note [Arena top block]), and it falls smoothly as a plan gets closer to
  /// fitting, where oom_bytes_missing is flat.
  sim::Bytes excess_bytes = 0;
};

/// When a policy or a search must stop early: past a deadline, or once a caller's flag is set.
/// An Evaluator that has one throws Stopped from evaluate() and simulate() once it is due, so a
/// policy deciding under a time limit unwinds at its next simulation, wherever it is.
struct Stop {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  const std::atomic<bool>* cancel = nullptr;
  [[nodiscard]] bool cancelled() const {
    return cancel != nullptr && cancel->load(std::memory_order_relaxed);
  }
  [[nodiscard]] bool due() const {
    return cancelled() || std::chrono::steady_clock::now() >= deadline;
  }
};

/// Thrown by an Evaluator whose Stop is due.
class Stopped : public std::runtime_error {
 public:
  Stopped() : std::runtime_error("stopped: past the deadline or cancelled") {}
};

/// One allocation or free of a lowered plan's compute stream (Note [Fitting without the clock]):
/// what the incremental checks (KeepCheck, EvictionCheck) keep of a base plan and replay.
struct MemoryOp {
  sim::BufferId buffer;
  sim::OpId op;
  bool alloc;
};

/// A lowered plan's allocations and frees replayed through the machine's DeviceMemory, with no
/// clock (Note [Fitting without the clock] in evaluator.cpp): what Evaluator::check_memory and
/// KeepCheck share.
class MemoryReplay {
 public:
  /// An empty device memory of `machine` for the buffers of `program` (which must outlive the
  /// replay); `e` is set feasible.
  void begin(const sim::Machine& machine, const sim::Program& program, Evaluation& e);
  /// Allocates `buffer` for `op`; false when it does not fit, with `e`'s feasible, oom_op and
  /// oom_bytes_missing then the engine's.
  bool allocate(sim::BufferId buffer, sim::OpId op, Evaluation& e);
  /// Frees the block `buffer` holds.
  void release(sim::BufferId buffer);
  /// Goes on from a copy of `at`, a replay of another program that `program` shares a prefix
  /// with (MemoryCheckpoint); `e` is set feasible.
  void resume(const MemoryReplay& at, const sim::Program& program, Evaluation& e);
  /// Sets `e.peak_reserved_bytes` once the replay is over.
  void end(Evaluation& e) const { e.peak_reserved_bytes = memory_.peak_reserved_bytes(); }

 private:
  const sim::Program* program_ = nullptr;
  sim::DeviceMemory memory_;
  std::vector<sim::DeviceMemory::Handle> handles_;  // per buffer
};

/// A plan's lowering and allocation replay, kept where the backward pass starts (Note [Resuming
/// a memory check] in evaluator.cpp): Evaluator::check_memory and simulate_if_fits go on from it
/// for the plans that ResumableLowerer::resumable allows. Made by Evaluator::checkpoint; read-only
/// after, so the Evaluators of several threads can share one.
class MemoryCheckpoint {
 public:
  [[nodiscard]] bool empty() const { return lowering_.empty(); }

 private:
  friend class Evaluator;
  ResumableLowerer::Checkpoint lowering_;
  MemoryReplay replay_;          // the replay up to where the backward pass starts
  bool replayed_ = false;        // the plan's allocations before the backward pass fit
  sim::Bytes memory_bytes_ = 0;  // the replay's device
  sim::AllocatorModel allocator_ = sim::AllocatorModel::kArena;
};

class Evaluator {
 public:
  /// The workload must outlive the Evaluator; the machine is copied.
  Evaluator(const sim::Workload& workload, const sim::Machine& machine);

  /// Cost of a plan (no per-instruction detail is kept).
  Evaluation evaluate(const sim::Plan& plan);
  /// Whether a plan's device memory fits, from its allocations and frees alone (Note [Fitting
  /// without the clock]): `feasible`, and for a plan that does not fit `oom_op`,
  /// `oom_bytes_missing` and `peak_reserved_bytes`, each what evaluate() gives; the time fields
  /// are zero. It lowers the plan but does not run the engine. A plan it finds fitting can still
  /// run out of host memory (Machine::host_memory_bytes), which only evaluate() sees.
  Evaluation check_memory(const sim::Plan& plan);
  /// The full timeline of a plan (spans, stalls with the tensor they wait for); valid until the
  /// next call on this Evaluator.
  const sim::Timeline& simulate(const sim::Plan& plan);
  /// check_memory(plan) and, only for a plan that fits, evaluate(plan), from one lowering: for a
  /// caller that needs the time of the plans that fit and only where the others ran out. Counts
  /// as a memory check, plus an evaluation when the plan fits.
  Evaluation evaluate_if_fits(const sim::Plan& plan);
  /// The same for simulate(): the timeline of a plan that fits, else nullptr, with where it ran
  /// out in `*fit` when given.
  const sim::Timeline* simulate_if_fits(const sim::Plan& plan, Evaluation* fit = nullptr);

  /// Keeps `plan`'s lowering and replay where the backward pass starts in `out` (empty when the
  /// plan cannot be resumed from: host placement, no backward pass). Counts as a memory check.
  void checkpoint(const sim::Plan& plan, MemoryCheckpoint& out);
  /// check_memory(plan), resumed from the checkpoint where ResumableLowerer::resumable allows (Note
  /// [Resuming a memory check]); the same answer.
  Evaluation check_memory(const sim::Plan& plan, const MemoryCheckpoint& from);
  /// simulate_if_fits(plan, fit) with its memory check resumed from the checkpoint.
  const sim::Timeline* simulate_if_fits(const sim::Plan& plan, const MemoryCheckpoint& from,
                                        Evaluation* fit = nullptr);

  [[nodiscard]] const sim::Workload& workload() const { return *workload_; }
  [[nodiscard]] const sim::Machine& machine() const { return machine_; }
  /// Plans evaluated or simulated so far, including those credited by helpers of this evaluator.
  [[nodiscard]] std::size_t count() const { return count_; }
  /// check_memory() calls so far (not in count()), including those credited by helpers.
  [[nodiscard]] std::size_t memory_checks() const { return memory_checks_; }
  /// Memory checks whose replay went on from a checkpoint's (MemoryCheckpoint), of memory_checks().
  [[nodiscard]] std::size_t resumed_replays() const { return resumed_replays_; }
  /// Counts evaluations made on this evaluator's behalf by other Evaluators (worker threads).
  void credit(std::size_t evaluations, std::size_t memory_checks = 0) {
    count_ += evaluations;
    memory_checks_ += memory_checks;
  }
  /// From now on evaluate() and simulate() throw Stopped once `stop` is due (nullptr: never). The
  /// Stop must outlive its use; helpers a policy creates should share it (stop()).
  void stop_when(const Stop* stop) { stop_ = stop; }
  /// From now on a plan that does not fit is simulated once more without a memory limit, to fill
  /// Evaluation::excess_bytes (the search ranks plans that do not fit by it).
  void measure_excess(bool on) { measure_excess_ = on; }
  [[nodiscard]] const Stop* stop() const { return stop_; }

 private:
  void lower(const sim::Plan& plan);
  /// check_memory's replay of the program lowered last.
  Evaluation replay_memory();
  /// The same for a program resumed from `from`: from its replay when the compute stream before
  /// the backward pass is the checkpoint's (`same_prefix`).
  Evaluation replay_memory(const MemoryCheckpoint& from, bool same_prefix);
  /// The memory check of `plan` lowered from the checkpoint, or nullopt (nothing lowered) when
  /// the plan does not resume from it.
  std::optional<Evaluation> resume(const sim::Plan& plan, const MemoryCheckpoint& from);
  /// simulate()'s run of the program lowered last when `memory` (its check) says it fits.
  const sim::Timeline* run_if_fits(const Evaluation& memory, Evaluation* fit);
  /// evaluate()'s run of the program lowered last.
  Evaluation run_lowered();

  const sim::Workload* workload_;
  sim::Machine machine_;
  ResumableLowerer lowerer_;
  sim::Program program_;  // reused between plans
  sim::Engine engine_;
  MemoryReplay replay_;  // check_memory's
  std::size_t count_ = 0;
  std::size_t memory_checks_ = 0;
  std::size_t resumed_replays_ = 0;
  const Stop* stop_ = nullptr;
  bool measure_excess_ = false;
};

/// The Evaluation summary of a timeline.
Evaluation summarize(const sim::Timeline& timeline);

}  // namespace memplan::search
