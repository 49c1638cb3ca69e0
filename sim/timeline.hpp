#pragma once
// Timeline: what happened when a Program ran — predicted by the engine or, later, measured by a
// backend — so that the two can be compared field by field: every instruction's span on its
// stream, the device memory curve, the stalls of the compute stream with their cause, the peaks,
// and when memory ran out, a report that says where and by how much.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/program.hpp"
#include "memory/device_memory.hpp"

namespace memplan::sim {

/// One instruction that takes time (run, recompute, encode, decode, copy).
struct Span {
  StreamId stream = StreamId::kCompute;
  std::int32_t index = 0;  // position in the Program's list of that stream
  Nanoseconds start_ns = 0;
  Nanoseconds end_ns = 0;
};

/// What the dispatching thread does (Note [Host stream] in sim/engine.hpp).
enum class HostActivity : std::uint8_t {
  kDispatch,     // the op's own host time (framework, Python, data loading): before its launch, and
                 // for a synchronizing op from its launch to its blocking call (sync_after_ns)
  kLaunch,       // launching an instruction the plan added (copy, recompute, codec)
  kSynchronize,  // waiting for the device after a synchronizing op
  kHostUpdate,   // a plan's update on the host: its gradients' copy-outs, then its runs (kHostRun)
};
std::string_view to_string(HostActivity activity);

/// A stretch of host time, on the host track.
struct HostSpan {
  HostActivity activity = HostActivity::kDispatch;
  OpId op = kNoOp;  // the op dispatched, or the op the launched instruction serves
  Nanoseconds start_ns = 0;
  Nanoseconds end_ns = 0;
};

/// Device memory right after an alloc or free.
struct MemoryPoint {
  Nanoseconds time_ns = 0;
  Bytes live_bytes = 0;      // bytes requested by the live buffers
  Bytes reserved_bytes = 0;  // end of the highest live block in the arena
};

/// One event of the device allocator (recorded with the memory curve): a buffer's block handed out
/// or given back, or a segment taken from or given back to the driver (the caching allocator's;
/// the arena's one segment, of the capacity, is there from the start and never named). What
/// io/memory_snapshot_export.hpp writes as a PyTorch memory snapshot's device trace.
struct AllocatorEvent {
  /// kSegmentMap, kSegmentUnmap: pages of an expandable segment (`offset`, `bytes`).
  enum class Kind : std::uint8_t {
    kAlloc,
    kFree,
    kSegmentAlloc,
    kSegmentFree,
    kSegmentMap,
    kSegmentUnmap
  };
  Kind kind = Kind::kAlloc;
  Nanoseconds time_ns = 0;
  BufferId buffer = kNoBuffer;  // kAlloc, kFree
  OpId op = kNoOp;              // the op the allocation or free serves (Instruction::op)
  std::int32_t segment = 0;     // the allocator's number (reused once a segment is given back)
  Bytes offset = 0;  // of the block within its segment (kAlloc, kFree), of the pages (map, unmap)
  Bytes bytes = 0;   // the block as the allocator hands it out; a segment's size
};

/// Time the compute stream spends on something other than the workload's own ops.
enum class StallCause : std::uint8_t {
  kSwapIn,     // waiting for a prefetch before a backward use
  kSwapOut,    // waiting for a copy-out before freeing a map (memory)
  kRecompute,  // re-running producers
  kCodec,      // encoding and decoding maps
};
inline constexpr int kStallCauseCount = 4;
std::string_view to_string(StallCause cause);

struct Stall {
  StallCause cause = StallCause::kSwapIn;
  TensorId tensor = kNoTensor;  // the map waited for or encoded (kNoTensor for a recompute)
  OpId op = kNoOp;              // the op being prepared or re-run
  Nanoseconds start_ns = 0;
  Nanoseconds end_ns = 0;
};

/// A collective as one rank ran it (Note [Collective start] in sim/engine.hpp): when the rank
/// reached it with its inputs ready, when it started (once every rank of its group had), and when
/// its transfer ended. start - arrival is the time this rank waited for a later peer.
struct CollectiveTiming {
  Nanoseconds arrival_ns = 0;
  Nanoseconds start_ns = 0;
  Nanoseconds end_ns = 0;

  [[nodiscard]] Nanoseconds wait_ns() const { return start_ns - arrival_ns; }
  [[nodiscard]] Nanoseconds transfer_ns() const { return end_ns - start_ns; }
};

struct OomReport {
  bool host = false;  // true: pinned host memory for swapped maps ran out, not device memory
  OpId op = kNoOp;    // the op the allocation was for
  BufferId buffer = kNoBuffer;
  Nanoseconds time_ns = 0;
  Bytes requested_bytes = 0;  // as the allocator rounds it (device) or as copied (host)
  Bytes capacity_bytes = 0;
  Bytes live_bytes = 0;
  std::array<Bytes, kTensorKindCount> live_by_kind{};  // tensor buffers, workspace included
  Bytes live_encoded_bytes = 0;                        // encoded copies of maps
  /// Bytes the plan keeps in resident host slots (host-placed tensors, Note [Host placement] in
  /// core/plan.hpp): what it already moved off the device.
  Bytes host_resident_bytes = 0;
  Bytes largest_free_block = 0;
  /// What would have to be found for the request (DeviceMemory::Shortfall): the request less the
  /// largest free block in an arena; what its new segment lacks under the caching allocator.
  Bytes bytes_missing = 0;
  /// Under the caching allocator, why in its terms (pool, cached blocks, the new segment).
  std::optional<CachingAllocator::Shortfall> caching;
};

/// The report for the kAlloc `alloc` of `program` that the device memory of `capacity` refused,
/// `shortfall` its account of why (DeviceMemory::shortfall of the buffer's bytes); `live(b)` says
/// whether buffer b was allocated then. The one builder of device OomReports: the engine and the
/// interpreter both call it (the caller sets time_ns when it knows one).
OomReport device_oom_report(const Program& program, const Instruction& alloc, Bytes capacity,
                            const DeviceMemory::Shortfall& shortfall,
                            const std::function<bool(BufferId)>& live);

struct Timeline {
  bool feasible = true;
  /// The step's time reached the end of the clock (kMaxNanoseconds, about 146 years, where every
  /// time saturates: core/units.hpp), as only an absurd link, latency or host speed makes it: no
  /// time of this run is known, so it is not feasible either, and says why (io's why_not_text).
  bool saturated = false;
  Nanoseconds iteration_ns = 0;   // wall time: max(last device instruction's end, host end + tail)
  Nanoseconds op_compute_ns = 0;  // the workload's own compute (each op once)
  Nanoseconds compute_busy_ns = 0;  // time the compute stream runs instructions
  Nanoseconds host_busy_ns = 0;     // dispatch and launch time of the host (0 without host side)
  Nanoseconds host_end_ns = 0;      // when the host leaves the step: host end + tail (host side)
  std::vector<Nanoseconds> stream_end_ns;  // per Program stream: its last instruction's end
  /// The step's period when the training loop runs it back to back (Note [Step period] in
  /// sim/engine.hpp; sim::step_period_ns): iteration_ns without a host side. Set by
  /// simulate_plan and the comparison, 0 where nobody computed it.
  Nanoseconds period_ns = 0;
  Nanoseconds host_ops_ns = 0;    // time the host stream runs host ops (an update on the CPU)
  Bytes peak_bytes = 0;           // peak of live bytes as requested
  Bytes peak_reserved_bytes = 0;  // peak end of the arena in use: fragmentation shows here
  Bytes peak_host_bytes = 0;      // peak pinned host bytes holding swapped maps
  std::array<Nanoseconds, kStallCauseCount> stall_ns_by_cause{};
  std::vector<Span> spans;
  std::vector<MemoryPoint> memory;
  std::vector<AllocatorEvent> allocator_events;  // recorded with `memory`
  std::vector<Stall> stalls;
  std::vector<HostSpan> host_spans;  // empty without a host side (recorded with spans)
  /// Per Program::collectives entry, in its order (always recorded).
  std::vector<CollectiveTiming> collectives;
  std::optional<OomReport> oom;
  std::size_t instructions_executed = 0;

  /// Total compute-stream time not spent on the workload's own ops.
  [[nodiscard]] Nanoseconds stall_ns() const {
    Nanoseconds total = 0;
    for (Nanoseconds ns : stall_ns_by_cause) total += ns;
    return total;
  }
  /// Share of the step's wall time in which the compute stream runs nothing (0 for an empty step).
  [[nodiscard]] double gpu_idle_share() const {
    if (iteration_ns <= 0) return 0.0;
    return 1.0 - static_cast<double>(compute_busy_ns) / static_cast<double>(iteration_ns);
  }
  void clear();
};

}  // namespace memplan::sim
