#pragma once
// import_kineto: turns one profiler step of a KinetoTrace into a layer-level memplan Workload —
// forward ops with their parameters and activations, the backward ops that differentiate them,
// gradients, optimizer state and the optimizer step — with each op's device time taken from the
// kernels it launched, on the device stream they ran on, the step's collectives as ops of their
// own and what orders the streams (Note [Device time] in step_units.hpp, Note [Stream waits] in
// stream_waits.cpp). The profiler does not record which tensor an op read, so the dataflow is
// reconstructed from program order and shapes (Note [Kineto dataflow] in dataflow.cpp,
// docs/kineto-import.md says where it can be wrong). The result is validated like any trace.
// A job of several ranks: kineto_job.hpp.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/workload.hpp"
#include "importers/allocation_history.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

/// Which part of the trace is the step: ProfilerStep#N (the default), else the first event named
/// `step_annotation` (a user annotation such as `record_function("train_step")`), else a time
/// window, else the whole trace. At most one of step, step_annotation, window, whole_trace.
struct ImportOptions {
  /// The N of "ProfilerStep#N"; nullopt picks the default step (Note [Default step] in
  /// step_selection.cpp).
  std::optional<std::int64_t> step;
  std::optional<std::string> step_annotation;
  /// [start, end) in nanoseconds from the trace's first event.
  std::optional<std::pair<sim::Nanoseconds, sim::Nanoseconds>> window;
  bool whole_trace = false;
  /// For a step recorded without shapes: the allocations that give its tensors sizes (a memory
  /// snapshot of the same run, importers/snapshot/snapshot_allocations.hpp). Without it such a
  /// step takes the trace's own addressed [memory] events where it has them.
  std::optional<AllocationHistory> allocations;
};

/// The step's time window: a `ProfilerStep#N` or annotation event on the thread that recorded it,
/// or a window of the whole trace (no thread, no event).
struct StepWindow {
  std::int64_t number = -1;  // N of ProfilerStep#N, -1 for the other kinds of step
  std::string label;         // "ProfilerStep#5", "annotation 'train_step'", "window 1ms:9ms"...
  std::string thread;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds end_ns = 0;
  /// The CPU event whose children are the step's ops; nullopt for a window.
  std::optional<std::size_t> event;
};

/// The profiler steps of a trace, in time order.
std::vector<StepWindow> list_steps(const KinetoTrace& trace);

/// What the importer did, for the CLI and the docs.
struct ImportReport {
  StepWindow step;
  bool step_was_chosen = false;  // true when no --step was given
  std::string step_reason;       // why the default step (Note [Default step])
  bool gpu = true;               // false: a CPU-only trace, op durations are CPU times
  std::size_t forward_ops = 0;
  std::size_t backward_ops = 0;
  std::size_t update_ops = 0;
  std::size_t folded_events = 0;  // top-level events folded into a neighbouring op
  /// Backward nodes whose sequence number no forward layer op recorded (views, transposes, ops
  /// before the step): folded into the previous op.
  std::size_t unmatched_backward = 0;
  bool persistent_grads = false;  // zero_grad zeroes .grad instead of freeing it
  /// The step has no recorded shapes: its ops carry their times and host side but no tensors
  /// (sim::require_sizes makes the commands that need sizes refuse).
  bool time_only = false;
  /// A step without shapes given sizes by allocations (Note [Sizes from allocations]): where
  /// they came from (empty when it was not), how many were made or freed in the step, and the
  /// live bytes they
  /// reached in it, what the in-core replay is measured against.
  std::string sizes_from;
  std::size_t sized_allocations = 0;
  std::optional<sim::Bytes> allocations_peak_bytes;
  /// The trainable parameters imported (from the ops that read them), and what the optimizer's
  /// foreach/fused ops record as their tensor lists (nullopt when they record none).
  std::size_t trainable_parameters = 0;
  sim::Bytes trainable_parameter_bytes = 0;
  std::optional<std::size_t> optimizer_shape_tensors;
  sim::Bytes optimizer_shape_bytes = 0;
  /// The leaves autograd accumulated a gradient into (AccumulateGrad nodes with recorded shapes),
  /// of `leaf_nodes` such nodes in the step: the trainable parameters by PyTorch's own account
  /// (Note [Leaves from AccumulateGrad] in parameters.cpp). `promoted_leaves`: inputs of
  /// forward ops made parameters because no layer rule accounted for their leaf (an embedding's
  /// table, a weight read by mm).
  std::size_t leaf_nodes = 0;
  std::size_t leaf_tensors = 0;
  sim::Bytes leaf_bytes = 0;
  std::size_t promoted_leaves = 0;
  int optimizer_states_per_parameter = 0;
  sim::Nanoseconds op_time_ns = 0;  // sum of op durations
  /// Host side (trace format v2): ops with a host side, blocking calls seen, the host time spent
  /// waiting in them (left out of dispatch times: the engine waits instead), the device streams.
  std::size_t host_ops = 0;
  std::size_t blocking_calls = 0;
  sim::Nanoseconds blocked_ns = 0;
  std::size_t streams = 0;
  /// Several device streams (trace format v3): ops made of a unit's work on another stream than
  /// the compute stream (Note [Device time]), the stream waits the trace recorded and the `after`
  /// edges they gave, and which rule of Note [Stream waits] ordered the streams.
  std::size_t side_stream_ops = 0;
  std::size_t stream_waits = 0;
  std::size_t after_edges = 0;
  std::string wait_rule;
  /// Collectives (Note [Collectives of a step]): how many, their bytes (the larger of each one's
  /// input and output), their kernels' recorded time, and their transfer time: the same for a
  /// single rank, whose peers are assumed alike; in a job of several ranks the least any rank of
  /// the group recorded, the rest of a rank's recorded time being its wait for the last peer
  /// (Note [Transfer and wait] in kineto_job.cpp).
  std::size_t collectives = 0;
  sim::Bytes collective_bytes = 0;
  sim::Nanoseconds collective_recorded_ns = 0;
  sim::Nanoseconds collective_transfer_ns = 0;
  bool transfer_from_peers = false;
  /// FSDP (Note [FSDP in a trace] in fsdp_steps.cpp): which FSDP ran the step ("FSDP2
  /// (fully_shard)", "FSDP1 (FlatParameter)"; empty when none did), the ranks its parameters are
  /// sharded over, the all-gathers of parameters and the reductions of gradients, the tensors
  /// made from the memory FSDP and its collectives allocated in the step, and the parameters'
  /// shards this rank holds.
  std::string fsdp;
  std::int64_t fsdp_shards = 0;
  std::size_t fsdp_gathers = 0;
  std::size_t fsdp_reductions = 0;
  std::size_t fsdp_tensors = 0;
  sim::Bytes fsdp_shard_bytes = 0;
  /// Note [Gathered parameters as feature maps] (fsdp_plan.cpp): the units whose gathered
  /// parameters became a feature map of their forward all-gather, the backward re-gathers removed
  /// (a plan's recompute of the map runs them), and the setting the trace ran (the workload's
  /// `distributed.fsdp`); `fsdp_unplanned` says why not, where the step's FSDP structure does not
  /// map.
  std::size_t fsdp_units = 0;
  std::size_t fsdp_regathers = 0;
  std::optional<sim::FsdpSetting> fsdp_setting;
  std::string fsdp_unplanned;
  std::size_t copies = 0;
  sim::Bytes h2d_bytes = 0;
  sim::Bytes d2h_bytes = 0;
  std::size_t pageable_copies = 0;
  /// With addressed [memory] events (importers/kineto/memory_timeline.hpp): the allocations paired
  /// in the trace (of the step's device), those allocated before the trace started, and how many
  /// forward ops' outputs, of those checked, match in size an allocation the op made.
  std::optional<std::size_t> allocations;
  std::size_t allocations_before_trace = 0;
  std::size_t outputs_checked = 0;
  std::size_t outputs_confirmed = 0;
};

struct ImportResult {
  sim::Workload workload;
  ImportReport report;
};

/// Imports one step of one rank. `file_label` is the file name written into the provenance. The
/// workload's `distributed` is the trace's, its collectives keep their recorded times. Throws
/// InputError when the trace has no usable step or the step has no forward op.
ImportResult import_kineto(const KinetoTrace& trace, const ImportOptions& options,
                           const std::string& file_label);

}  // namespace memplan::importers
