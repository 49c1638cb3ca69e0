#pragma once
// Program: a Plan lowered to what a device does (docs/simulator.md "Program"). The compute stream,
// one copy stream per direction, the host's stream for host ops, and one stream per other device
// stream the step ran on (communication, side streams: Note [Device streams] in core/workload.hpp)
// each run their instruction list in order; record/wait on events are the only links between
// streams. All memory operations (alloc, free)
// are on the compute stream, so they happen in one total order that the simulator and the
// backends share: the same arena calls give the same offsets, the same peak and the same
// fragmentation, whatever the real timing. The Program knows nothing of the Machine: copies carry
// bytes, the engine prices them.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ids.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"

namespace memplan::sim {

/// kHost: the CPU running host ops (an optimizer update on the host, Note [Host placement] in
/// core/plan.hpp) over host slots; empty unless the plan updates on the host. The workload's other
/// device streams follow: its stream s (s >= 1) is StreamId(kFixedStreamCount - 1 + s).
enum class StreamId : std::uint8_t { kCompute = 0, kD2H = 1, kH2D = 2, kHost = 3 };
/// The streams every Program has; Program::streams may hold more (side streams).
inline constexpr int kFixedStreamCount = 4;
/// At most this many device streams per workload (Workload::streams), so that a StreamId holds one.
inline constexpr int kMaxDeviceStreams = 250;
/// "compute", "d2h", "h2d", "host", or "stream N" for a side stream.
std::string_view to_string(StreamId stream);
/// The Program stream that runs the workload's device stream `stream` (0: the compute stream).
constexpr StreamId program_stream(std::int32_t stream) {
  return stream == 0 ? StreamId::kCompute : static_cast<StreamId>(kFixedStreamCount - 1 + stream);
}
constexpr bool is_side_stream(StreamId stream) {
  return static_cast<int>(stream) >= kFixedStreamCount;
}

enum class InstrKind : std::uint8_t {
  kRun,         // compute: run `op` on `operands` (inputs, outputs, then workspace if any)
  kRecompute,   // compute: run `op` again to regenerate a freed tensor; operands as for kRun
  kEncode,      // compute: encode `buffer` (full map) into `aux` (encoded buffer)
  kDecode,      // compute: decode `aux` (encoded buffer) into `buffer` (full map)
  kCopyOut,     // d2h: copy `buffer` to host slot `aux`
  kCopyIn,      // h2d: copy host slot `aux` into `buffer` (a fresh one, or a parameter's own)
  kAlloc,       // compute: take `buffer` from the arena (before `op`, for naming)
  kFree,        // compute: give `buffer` back
  kRecord,      // any: event `aux` happens when the stream reaches this point
  kWait,        // any: the stream waits until event `aux` has happened
  kHostRun,     // host: run `op` on the CPU; `operands` are host slots: its inputs (tensors from
                // before the step updated in place), then its outputs (temporary slots)
  kCollective,  // side stream: run `op`, a collective; `aux` indexes Program::collectives,
                // `operands` as for kRun, duration_ns its recorded transfer time
};
std::string_view to_string(InstrKind kind);

struct Instruction {
  InstrKind kind = InstrKind::kRun;
  OpId op = kNoOp;  // the op run, or the op an alloc/free/codec/copy serves (for names)
  BufferId buffer = kNoBuffer;
  /// An event, a host slot or a second buffer, by kind (see InstrKind), or -1: read it through
  /// event(), slot() or encoded().
  std::int32_t aux = -1;
  std::int32_t operands_begin = 0;  // kRun/kRecompute/kHostRun: index into Program::operands
  std::int32_t operand_count = 0;
  Nanoseconds duration_ns = 0;  // compute kinds; copies are priced by the engine

  /// The event recorded or waited for: kRecord, kWait only.
  [[nodiscard]] EventId event() const { return event_id(aux); }
  /// The host slot copied to or from: kCopyOut, kCopyIn only.
  [[nodiscard]] HostSlotId slot() const { return host_slot_id(aux); }
  /// The encoded buffer written or read: kEncode, kDecode only.
  [[nodiscard]] BufferId encoded() const { return buffer_id(aux); }
  /// The collective run, an index into Program::collectives: kCollective only.
  [[nodiscard]] std::size_t collective() const { return static_cast<std::size_t>(aux); }
};

enum class BufferRole : std::uint8_t { kTensor, kWorkspace, kEncoded };

/// One device allocation: allocated once and freed at most once (persistent tensors never are).
struct Buffer {
  Bytes bytes = 0;
  BufferRole role = BufferRole::kTensor;
  TensorKind kind = TensorKind::kActivation;  // of `tensor` (workspace for kWorkspace)
  TensorId tensor = kNoTensor;                // the tensor stored (kNoTensor for workspace)
  OpId op = kNoOp;                            // the op whose workspace it is (kWorkspace)
  Encoding encoding = Encoding::kNone;        // kEncoded
  /// Allocated before the first op for a tensor that exists before the step: a backend fills it
  /// with the tensor's initial data when it is allocated (a host-placed tensor's prefetched
  /// copies are filled by their copy-in instead).
  bool initial = false;
};

/// Why a stream waits for an event: what the stall is blamed on.
enum class WaitCause : std::uint8_t {
  kProducer,  // a copy-out waits for the map to be written
  kAlloc,     // a prefetch waits for its buffer to be allocated
  kSwapOut,   // compute waits for a copy-out before freeing the map (memory)
  kSwapIn,    // compute waits for a prefetch before a backward use
  kIssue,     // a side stream's op waits for the compute stream's work issued before it
  kStream,    // an op waits for an op of another device stream (its input, `after`)
};
inline constexpr int kWaitCauseCount = 6;
std::string_view to_string(WaitCause cause);

struct Event {
  WaitCause cause = WaitCause::kProducer;
  TensorId tensor = kNoTensor;
};

/// A host copy of a swapped map or of a host-placed tensor, or a host update's temporary (Note
/// [Host placement] in core/plan.hpp). A resident slot holds its tensor from the step's start (a
/// parameter, optimizer state or input whose home is the host, or a host copy of one a host update
/// reads: a parameter's master copy) and counts in host memory for the whole step; copies to and
/// from it do not change host memory. A temporary slot holds what a host update's op writes: from
/// the start of the first host run that names it (its op) to the end of the last (the last update
/// op that reads it or a version written over it). Other slots hold their tensor from the start of
/// its copy-out to the end of its copy-in.
struct HostSlot {
  TensorId tensor = kNoTensor;
  Bytes bytes = 0;
  bool resident = false;
  bool temporary = false;
};

/// The thread that dispatches the step, as the engine needs it (Note [Host stream] in
/// sim/engine.hpp): copied from the workload by the lowering. Empty `ops` when the workload records
/// no host side at all: the host then never limits the step.
struct HostProgram {
  std::vector<HostSide> ops;  // per op id (an op without a recorded host side: dispatch 0)
  /// Per op id: the index in the compute stream of the op's first instruction (a prefetch, a
  /// regeneration or the run itself), where the host dispatches it.
  std::vector<std::size_t> dispatch_at;
  Nanoseconds launch_ns = 0;  // host time to launch each instruction the plan adds
  Nanoseconds tail_ns = 0;    // host time after the last launch until the step ends

  [[nodiscard]] bool active() const { return !ops.empty(); }
};

struct Program {
  /// The fixed streams (StreamId), then one per side stream of the workload.
  std::vector<std::vector<Instruction>> streams =
      std::vector<std::vector<Instruction>>(kFixedStreamCount);
  /// Operands of runs and recomputes (buffers) and of host runs (host slots), each instruction's
  /// in one stretch: read them through operand_buffer() and operand_slot().
  std::vector<std::int32_t> operands;
  std::vector<Buffer> buffers;
  std::vector<Event> events;
  std::vector<HostSlot> host_slots;
  /// Sum of the durations of the workload's ops that run on the device (each counted once; an
  /// update on the host is not): the iteration time when nothing waits and nothing is recomputed
  /// or encoded.
  Nanoseconds op_compute_ns = 0;
  std::array<std::size_t, kActionCount> action_counts{};
  HostProgram host;
  /// The collectives kCollective instructions run, in issue order, and where this rank stands
  /// (the workload's Distributed; rank 0 of 1 for a single-GPU step): the engine prices each
  /// through the Machine's interconnect.
  std::vector<Collective> collectives;
  /// How many of `collectives` are the workload's own, in its order; those after them are a
  /// plan's re-runs (Note [Re-running a side-stream op] in sim/lowering.cpp).
  std::size_t workload_collectives = 0;
  std::int32_t rank = 0;
  std::int32_t world_size = 1;

  [[nodiscard]] std::size_t instruction_count() const {
    std::size_t n = 0;
    for (const auto& s : streams) n += s.size();
    return n;
  }
  [[nodiscard]] const std::vector<Instruction>& stream(StreamId s) const {
    return streams[static_cast<std::size_t>(s)];
  }
  /// Operand `k` of `in`, a kRun or kRecompute: a buffer.
  [[nodiscard]] BufferId operand_buffer(const Instruction& in, std::int32_t k) const {
    return buffer_id(operands[static_cast<std::size_t>(in.operands_begin + k)]);
  }
  /// Operand `k` of `in`, a kHostRun: a host slot.
  [[nodiscard]] HostSlotId operand_slot(const Instruction& in, std::int32_t k) const {
    return host_slot_id(operands[static_cast<std::size_t>(in.operands_begin + k)]);
  }
};

/// A buffer's name for people: its tensor's, "conv1_out (fp16)" for an encoded copy, "workspace
/// of conv1".
std::string buffer_label(BufferId buffer, const Program& program, const Workload& workload);
/// "conv2 (recompute)", "copy-out relu1_out", "alloc relu1_out": a short label for exports.
std::string instruction_label(const Instruction& instruction, const Program& program,
                              const Workload& workload);

}  // namespace memplan::sim
