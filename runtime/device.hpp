#pragma once
// Device: what the Program interpreter needs from a backend, with CUDA stream semantics. Four
// streams (compute, d2h, h2d, and host: the CPU running host ops) each execute what is enqueued on
// them in order and asynchronously; record/wait on events are the only links between streams;
// allocate/free are stream-ordered on the compute stream (like cudaMallocAsync) and go through one
// capped sim::DeviceArena, so a backend that sees the same calls as the simulator hands out the
// same offsets and reaches the same peak. A Device knows the Program it runs (prepare), so that
// instructions are passed by their position in a stream's list and the interpreter stays free of
// any backend detail.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/program.hpp"
#include "core/workload.hpp"
#include "sim/timeline.hpp"

namespace memplan::runtime {

/// Memory figures of a run, taken from the device's arena.
struct MemoryStats {
  sim::Bytes peak_bytes = 0;           // peak of live bytes as requested (sum of buffer sizes)
  sim::Bytes peak_reserved_bytes = 0;  // peak end of the arena in use
  sim::Bytes capacity_bytes = 0;
  sim::Bytes live_bytes = 0;  // now
  sim::Bytes largest_free_block = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  /// Starts a run of `program` (of `workload`, both outliving the run): an empty arena, empty
  /// streams, no event recorded, the clock at zero.
  virtual void prepare(const sim::Workload& workload, const sim::Program& program) = 0;

  /// Takes `buffer` from the arena in compute-stream order; false (and nothing taken) when no
  /// free block is large enough under the cap.
  [[nodiscard]] virtual bool allocate(sim::BufferId buffer) = 0;
  /// Gives `buffer` back in compute-stream order.
  virtual void free(sim::BufferId buffer) = 0;

  /// Enqueues the kernel (run, recompute, encode, decode) at `index` of the compute stream.
  virtual void enqueue_kernel(std::int32_t index) = 0;
  /// Enqueues the copy at `index` of `stream` (kD2H: copy-out, kH2D: copy-in).
  virtual void enqueue_copy(sim::StreamId stream, std::int32_t index) = 0;
  /// Enqueues the host op (kHostRun) at `index` of the host stream: an update run on the CPU over
  /// host slots (runtime/host_ops.hpp). Resident host slots hold their tensor's initial data from
  /// prepare on (Note [Host placement] in core/plan.hpp).
  virtual void enqueue_host_op(std::int32_t index) = 0;
  /// The event happens when `stream` reaches this point.
  virtual void record(sim::StreamId stream, sim::EventId event) = 0;
  /// `stream` goes on only after the event happened (its record was enqueued before).
  virtual void wait(sim::StreamId stream, sim::EventId event) = 0;
  /// Blocks until every stream is idle; rethrows the first error a stream met.
  virtual void synchronize() = 0;

  /// Spans of the kernels and copies run since prepare, with measured start and end (ns since
  /// prepare). Valid after synchronize.
  [[nodiscard]] virtual std::vector<sim::Span> measured_spans() const = 0;
  [[nodiscard]] virtual MemoryStats memory_stats() const = 0;
  /// The device allocator's events since prepare, in order, each at the host clock's time of the
  /// call since prepare (as c10 stamps its trace entries), `op` left kNoOp (run_program names
  /// it): what `memplan validate --snapshot-out` writes. Empty for a device that keeps none.
  [[nodiscard]] virtual std::vector<sim::AllocatorEvent> allocator_events() const { return {}; }
  /// Why a request of `bytes` fails now (sim::DeviceMemory::shortfall); by default, an arena's
  /// account from memory_stats (the request aligned, less the largest free block).
  [[nodiscard]] virtual sim::DeviceMemory::Shortfall shortfall(sim::Bytes bytes) const {
    sim::DeviceMemory::Shortfall s;
    s.requested = sim::DeviceArena::aligned_size(bytes);
    s.largest_free_block = memory_stats().largest_free_block;
    s.missing = std::max<sim::Bytes>(0, s.requested - s.largest_free_block);
    return s;
  }

  /// Bytes of tensor `t` as the run left them: parameters and optimizer state (on the device at the
  /// end, else in their resident host slot), or the value a kRun wrote for a gradient or the loss
  /// (when captured). Empty when not available. Valid after synchronize.
  [[nodiscard]] virtual std::vector<std::byte> tensor_bytes(sim::TensorId t) const = 0;
  /// Whether kRun outputs that are gradients or the loss are copied aside for tensor_bytes (on
  /// by default; off for timing runs, where the copies would add time the simulator does not
  /// know of). Takes effect at the next prepare's run.
  virtual void set_capture(bool capture) = 0;

  /// Bytes of encoded maps that did not fit the buffer the plan gave them and went to host memory
  /// in this run (a sparse map denser than planned, Note [Sparse format] in core/plan.hpp): device
  /// memory is as predicted, but the time of those host writes is not. 0 for a device that never
  /// spills. Valid after synchronize.
  [[nodiscard]] virtual sim::Bytes spilled_bytes() const { return 0; }
};

}  // namespace memplan::runtime
