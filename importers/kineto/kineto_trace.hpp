#pragma once
// KinetoTrace: the events of a PyTorch profiler (Kineto) Chrome-trace file, normalised so that
// the importer does not care which of the two formats it came from:
//  - 2021: categories `Operator`, `Runtime`, `Kernel`, `Memcpy`, `Memset`; args "External id"
//    on ops, "external id" and "correlation" on runtime calls and GPU activities;
//  - current: `cpu_op`, `user_annotation`, `cuda_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`,
//    `ac2g` flow events (`async_cpu_to_gpu` in some Kineto versions) linking a launch to its GPU
//    activity; `[memory]` events carry `Addr`,
//    `Total Allocated` and `Total Reserved`.
// A bare JSON array whose events carry no category is the legacy format of a PyTorch built
// without Kineto (torch.autograd.profiler): it has no device activity, shapes or memory, and
// parsing refuses it with what to do instead.
// Times are converted from microseconds (possibly fractional) to integer nanoseconds. Events
// memplan does not use (python functions, flows other than ac2g, metadata) are skipped; events it
// uses must carry the fields it needs, of the right type, or parsing throws InputError naming the
// event's JSON path.
// A step that ran on several GPUs adds what c10d records of its communication (CommArgs:
// `record_param_comms`, `nccl:*` and `gloo:*` ops, the collective's kernel), the device's own
// synchronizations (`cuda_sync`, with enable_cuda_sync_events) and the top-level
// `distributedInfo`. One file may hold several ranks (a merged trace): parse_kineto_ranks splits
// it, one KinetoTrace per rank (Note [Ranks of a file] in rank_split.cpp).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/collective.hpp"
#include "core/units.hpp"

namespace memplan::importers {

/// What c10d records of a communication op under Kineto's keys ("Collective name", "In msg
/// nelems", "Process Group Ranks"...: PyTorch's ParamCommsUtils, Kineto's output_json): on a
/// `record_param_comms` op, copied by newer Kineto onto the collective's kernel; for an `nccl:*` or
/// `gloo:*` op, the collective its name gives ("nccl:send 0->1": send, peer 1).
struct CommArgs {
  /// "Collective name" as c10d gives it ("allreduce", "_allgather_base", "wait"); empty when not
  /// recorded (PyTorch before 2.1 records none on record_param_comms).
  std::string collective;
  std::optional<std::int64_t> in_nelems;   // "In msg nelems"
  std::optional<std::int64_t> out_nelems;  // "Out msg nelems"
  std::string dtype;                       // "dtype" in c10's spelling ("Float", "BFloat16")
  std::optional<std::int64_t> group_size;  // "Group size"
  std::string group;                       // "Process Group Name" ("0": the default group)
  std::string group_description;           // "Process Group Description" ("default_pg")
  std::vector<std::int32_t> group_ranks;   // "Process Group Ranks"; empty when not recorded
  std::optional<std::int64_t> rank;        // "Rank": this process's global rank
  std::optional<std::int64_t> peer;        // "Dst Rank" of a send, "Src Rank" of a recv
};

/// A CPU-side operator or annotation (a complete "X" event on a host thread).
struct CpuEvent {
  std::string name;
  std::string thread;  // "pid/tid"
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> external_id;
  std::optional<std::int64_t> sequence_number;
  /// Recorded input shapes ("Input Dims"/"Input dims"); empty when not recorded. A 0-dim tensor
  /// and a non-tensor argument both appear as an empty shape.
  std::vector<std::vector<std::int64_t>> input_dims;
  /// Shapes of the tensor-list arguments (a foreach or fused optimizer op's parameters, grads,
  /// states), one list per such argument in argument order.
  std::vector<std::vector<std::vector<std::int64_t>>> input_lists;
  /// Recorded input types ("Input type"), parallel to input_dims when present.
  std::vector<std::string> input_types;
  /// "Concrete Inputs" (PyTorch 2.x: the scalar arguments' values as text, "" for tensors), kept
  /// for view ops only (transpose's dims, a view's sizes: step_events.hpp's view_shape).
  std::vector<std::string> concrete_inputs;
  /// A communication op's arguments (`record_param_comms`, `nccl:*`, `gloo:*`); null for any
  /// other (shared, not inline: a trace holds millions of events and few are collectives).
  std::shared_ptr<const CommArgs> comm;

  [[nodiscard]] sim::Nanoseconds end_ns() const { return start_ns + duration_ns; }
};

/// A CUDA runtime call (cudaLaunchKernel, cudaMemcpyAsync...) on a host thread.
struct RuntimeEvent {
  std::string name;
  std::string thread;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> correlation;
  std::optional<std::int64_t> external_id;
};

enum class GpuKind : std::uint8_t { kKernel, kMemcpy, kMemset };

/// Work that ran on the device: a kernel, a copy or a memset.
struct GpuEvent {
  GpuKind kind = GpuKind::kKernel;
  std::string name;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> correlation;
  std::optional<std::int64_t> external_id;
  std::int64_t stream = 0;
  /// Bytes copied or set ("bytes"), when recorded.
  std::optional<sim::Bytes> bytes;
  /// A collective's kernel as newer Kineto writes it: its record_param_comms op's arguments
  /// (null for any other kernel).
  std::shared_ptr<const CommArgs> comm;
};

/// A synchronization the device recorded (category `cuda_sync`, written with PyTorch's
/// enable_cuda_sync_events): for a "Stream Wait Event", stream `stream` waited for the CUDA event
/// that the cudaEventRecord call of correlation `record_correlation` recorded on
/// `wait_on_stream`; `correlation` is the cudaStreamWaitEvent call's.
struct SyncEvent {
  std::string name;  // "Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync"
  sim::Nanoseconds start_ns = 0;
  std::int64_t stream = -1;
  std::optional<std::int64_t> correlation;
  std::optional<std::int64_t> wait_on_stream;      // -1 in the file: not known
  std::optional<std::int64_t> record_correlation;  // -1 in the file: not known
};

/// One allocation (bytes > 0) or free (bytes < 0) of the caching allocator.
struct MemoryEvent {
  std::string thread;
  sim::Nanoseconds time_ns = 0;
  sim::Bytes bytes = 0;
  std::int64_t device_type = 0;  // 0 CPU, 1 CUDA
  std::int64_t device_id = 0;    // "Device Id": which GPU (-1 on the CPU)
  std::optional<sim::Bytes> total_allocated;
  std::optional<std::int64_t> addr;  // "Addr" (current format): pairs an allocation with its free
};

enum class KinetoFormat : std::uint8_t { k2021, kCurrent, kUnknown };

struct KinetoTrace {
  std::string source;  // the file name, for errors and provenance
  KinetoFormat format = KinetoFormat::kUnknown;
  /// `baseTimeNanoseconds`: the Unix time, in nanoseconds, of `ts` 0 (PyTorch 2.2 on); absent,
  /// `ts` counts from the epoch itself. What joins the trace with a memory snapshot's clock.
  std::optional<sim::Nanoseconds> base_time_ns;
  std::string device_name;           // from deviceProperties, empty when absent
  sim::Bytes device_memory = 0;      // totalGlobalMem, 0 when absent
  std::vector<CpuEvent> cpu_events;  // sorted by (start, longer first)
  std::vector<RuntimeEvent> runtime_events;
  std::vector<GpuEvent> gpu_events;        // sorted by start
  std::vector<MemoryEvent> memory_events;  // sorted by time, stable
  std::vector<SyncEvent> sync_events;      // sorted by start
  /// This trace's place in its job: `distributedInfo` (backend, rank, world_size), the rank a
  /// merged file's metadata gives, or what the collectives say (rank_split.cpp); nullopt for a
  /// single-GPU step.
  std::optional<sim::Distributed> distributed;
  /// The runtime calls are HIP's (ROCm): the collectives' library is RCCL.
  bool hip = false;
  /// How many ranks the file held (a merged file: several), and the rule that told them apart
  /// (Note [Ranks of a file]).
  std::size_t file_ranks = 1;
  std::string rank_rule;
  /// Whether the file says which rank it is (distributedInfo, a merged file's metadata, its
  /// collectives' "Rank"); a rank taken as 0 for want of any is not known.
  bool rank_known = false;
};

/// The Unix time, in nanoseconds, of each trace's time 0 (its base_time_ns, else 0: a trace that
/// counts from the epoch), in order: the clocks memory snapshots of the same ranks are put on.
std::vector<sim::Nanoseconds> time_zeros(const std::vector<KinetoTrace>& traces);

/// Parses the text of a trace of one rank (already decompressed). Throws InputError naming
/// `source`, also when the file holds several ranks (parse_kineto_ranks reads those).
KinetoTrace parse_kineto_trace(std::string_view text, std::string_view source);

/// Every rank the text holds, in rank order: one for a file a profiler wrote, several for a
/// merged file (Note [Ranks of a file] in rank_split.cpp).
std::vector<KinetoTrace> parse_kineto_ranks(std::string_view text, std::string_view source);

/// Reads a .json or .json.gz file and parses it.
KinetoTrace read_kineto_trace(const std::string& path);
/// Reads a .json or .json.gz file and parses every rank it holds.
std::vector<KinetoTrace> read_kineto_ranks(const std::string& path);

}  // namespace memplan::importers
