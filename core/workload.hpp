#pragma once
// Workload: one training iteration as memplan sees it — ops in issue order and the tensors they
// read and write, with sizes, kinds and measured or modeled costs. Every source of work (a recorded
// trace, an imported profiler trace, the zoo's cost model) produces one, and everything downstream
// (plans, lowering, simulation, execution) reads it. Its file form is the trace format
// (traces/FORMAT.md, io/trace_io.hpp).
//
// Ids are positions (core/ids.hpp): tensor `t` is `tensors[index(t)]`, op `o` is `ops[index(o)]`.
// validate() enforces every structural rule, so code that takes a validated Workload can index
// without checking.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/allocator_model.hpp"
#include "core/collective.hpp"
#include "core/ids.hpp"
#include "core/layer.hpp"
#include "core/link.hpp"
#include "core/units.hpp"

namespace memplan::sim {

enum class Phase : std::uint8_t { kForward, kBackward, kUpdate };
inline constexpr int kPhaseCount = 3;

enum class TensorKind : std::uint8_t {
  kActivation,
  kParameter,
  kGradient,
  kOptimizerState,
  kWorkspace,
  kInput,
};
inline constexpr int kTensorKindCount = 6;

std::string_view to_string(Phase phase);
std::string_view to_string(TensorKind kind);
std::optional<Phase> parse_phase(std::string_view text);
std::optional<TensorKind> parse_tensor_kind(std::string_view text);

/// Bytes per element of a dtype name ("float32" → 4), or nullopt when memplan does not know it.
std::optional<Bytes> dtype_bytes(std::string_view dtype);

/// Tensors that exist before the step starts and outlive it (weights, optimizer state).
constexpr bool is_persistent(TensorKind kind) {
  return kind == TensorKind::kParameter || kind == TensorKind::kOptimizerState;
}
/// Tensors that may have no producer op: they are resident when the step starts.
constexpr bool is_preexisting(TensorKind kind) {
  return is_persistent(kind) || kind == TensorKind::kInput;
}

struct Tensor {
  TensorId id = kNoTensor;
  std::string name;
  Bytes bytes = 0;
  TensorKind kind = TensorKind::kActivation;
  std::vector<std::int64_t> shape;  // empty when unknown
  std::string dtype;                // empty when unknown
  OpId producer = kNoOp;            // kNoOp for inputs, parameters, optimizer state
  /// When set, this tensor is written over the buffer of that input of its producer (an in-place
  /// ReLU, say): it takes over that buffer instead of allocating its own.
  TensorId in_place_of = kNoTensor;
  /// Only its lifetime is known, not what reads it: its buffer was allocated while its producer
  /// ran (or before the step) and freed while its last listed reader ran, as an allocator
  /// recorded it (a profiler trace without shapes given sizes by its allocations: Note
  /// [Sizes from allocations] in importers/kineto/allocation_sizes.cpp). Its memory is simulated
  /// exactly, but no plan moves it: a swap or a recompute would need the reads in between.
  bool lifetime_only = false;

  friend bool operator==(const Tensor&, const Tensor&) = default;
};

/// Another way to run the same op (a convolution algorithm): vDNN picks per layer between the
/// fastest one and the memory-optimal one.
struct Algorithm {
  std::string name;
  Bytes workspace_bytes = 0;
  Nanoseconds duration_ns = 0;

  friend bool operator==(const Algorithm&, const Algorithm&) = default;
};

/// The host side of an op (trace format v2): how the CPU thread that dispatches the step spent
/// its time. Absent in v1 traces and wherever the source has no CPU timeline; the engine then
/// assumes a host that is never the bottleneck.
struct HostSide {
  /// Host time from the previous op's launch (or the step's start, for the first op) until this
  /// op's device work is launched: framework overhead, Python, data loading between ops.
  Nanoseconds dispatch_ns = 0;
  /// After launching this op the host waits until every device op issued so far has finished
  /// (stream or device synchronize, a blocking copy, `.item()`).
  bool synchronizes = false;
  /// With `synchronizes`: host time from this op's launch until the wait begins (the op's later
  /// launches, such as a foreach optimizer's kernels, and Python up to the blocking call). The
  /// device keeps running meanwhile, so the wait is only for what is left.
  Nanoseconds sync_after_ns = 0;

  friend bool operator==(const HostSide&, const HostSide&) = default;
};

/// Layer hyper-parameters a backend needs to run an op for real and a cost model may use:
/// "kernel", "stride", "padding", "groups" for convolutions and pooling, "p" for dropout,
/// "epsilon" for batch-norm, ... Each value is a list of numbers (a scalar is a list of one).
using Attributes = std::map<std::string, std::vector<double>, std::less<>>;

struct Op {
  OpId id = kNoOp;
  std::string name;
  LayerType layer;  // what it computes (core/layer.hpp): a known layer, or a generic op
  Phase phase = Phase::kForward;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Bytes workspace_bytes = 0;
  Nanoseconds duration_ns = 0;
  std::optional<double> flops;
  std::optional<Bytes> bytes_moved;
  /// For a backward op: the forward op it differentiates (kNoOp when not known).
  OpId differentiates = kNoOp;
  /// Alternatives to the default algorithm above (empty for most layers).
  std::vector<Algorithm> algorithms;
  Attributes attributes;
  /// The dispatching thread's side of this op (trace format v2); nullopt when not recorded.
  std::optional<HostSide> host;
  /// The device stream it ran on (trace format v3, Note [Device streams]): 0 is the stream the
  /// step's compute runs on, others are Workload::streams' positions.
  std::int32_t stream = 0;
  /// Ops on other streams whose end this op waits for beyond its inputs (a recorded
  /// cudaStreamWaitEvent): each issued before it.
  std::vector<OpId> after;
  /// Set for a communication op (trace format v3): its duration_ns is then its transfer time as
  /// recorded, without waiting for other ranks.
  std::optional<Collective> collective;

  friend bool operator==(const Op&, const Op&) = default;
};

/// The device the trace was recorded on or modeled for, with its copy link's values when known.
struct DeviceInfo {
  std::string name;
  Bytes memory_bytes = 0;
  PartialLink link;  // file keys h2d_bytes_per_s, d2h_bytes_per_s, copy_latency_ns
  std::optional<BytesPerSecond> memory_bandwidth_bytes_per_s;
  std::optional<double> peak_flops_per_s;
  /// The host CPU's speed at host ops (file key host_bytes_per_s), as the backend that recorded
  /// the trace measured it (runtime/host_speed.hpp); Machine::host_bandwidth_bytes_per_s.
  std::optional<BytesPerSecond> host_bandwidth_bytes_per_s;
  /// The allocator the step's memory came from (file key allocator: "arena" or "caching");
  /// Machine::allocator.
  std::optional<AllocatorModel> allocator;

  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

/// Where the numbers come from: recorded by a backend, imported from a profiler file, modeled by
/// a cost model for a device, or written by hand.
struct Provenance {
  std::string source;  // "recorded" | "imported" | "modeled" | "hand-written"
  std::string backend;
  std::string file;
  std::optional<std::int64_t> step;
  std::string cost_model;
  std::string device;
  std::string note;

  friend bool operator==(const Provenance&, const Provenance&) = default;
};

/// Note [Device streams]
/// ~~~~~~~~~~~~~~~~~~~~~~
/// A step may run on several device streams: the stream of its compute, and others for
/// communication (NCCL's, RCCL's) or for work a user put beside it. Each stream runs its ops in
/// issue order. An op on another stream than the compute stream starts only after everything
/// issued on the compute stream before it has ended — what `wait_stream(current_stream())`
/// before a side stream's work, and c10d before every collective, make CUDA do — and after the
/// ops it reads or lists in `after`; an op of any stream that reads what an op of another stream
/// wrote waits for that op's end. Memory is still allocated and freed in issue order, on the
/// compute stream (core/program.hpp).

struct Workload {
  Provenance provenance;
  DeviceInfo device;
  /// Which rank of which job this step is (trace format v3); nullopt for a single-GPU step.
  std::optional<Distributed> distributed;
  /// Labels of the device streams ops run on, by Op::stream ("compute (stream 7)", "nccl (stream
  /// 20)"); empty when every op runs on stream 0. Stream 0 is the compute stream.
  std::vector<std::string> streams;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  /// Host time to launch one device operation that a plan adds (a copy, a recompute, a codec),
  /// measured from the trace's launches (trace format v2); nullopt when not recorded.
  std::optional<Nanoseconds> launch_ns;
  /// Host time after the last op's launch until the step ends (trace format v2); 0 when unknown.
  Nanoseconds host_tail_ns = 0;

  [[nodiscard]] const Tensor& tensor(TensorId id) const { return tensors[index(id)]; }
  [[nodiscard]] const Op& op(OpId id) const { return ops[index(id)]; }

  friend bool operator==(const Workload&, const Workload&) = default;
};

/// Whether `op` is the last op of its backward node. A backward node is autograd's unit of
/// backward work: the longest run of consecutive backward ops that differentiate the same forward
/// op (a recorded step's ops between two node hooks, memplan.torch.recorder; the zoo's one op per
/// layer). A node unpacks what it saved before its first op and holds it until it returns. A
/// backward op that differentiates no known forward op is a node of its own; any other op ends
/// none.
bool ends_backward_node(const Workload& workload, OpId op);

/// Checks every structural rule of trace formats v1 to v3 (traces/FORMAT.md) and throws InputError
/// naming `source` and the JSON path of the first problem: ids equal positions, references in
/// range, sizes and durations sane, producers consistent with outputs, no cycle, no read before a
/// write, in-place outputs over dead inputs; streams, waits, collectives, `distributed` consistent.
void validate(const Workload& workload, std::string_view source);

}  // namespace memplan::sim
