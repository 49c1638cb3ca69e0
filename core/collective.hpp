#pragma once
// Collective: a communication op of a step that ran on several GPUs, as PyTorch's c10d records it
// (`record_param_comms`, `nccl:all_reduce`, `gloo:broadcast`): which collective, how many bytes
// this rank sends and receives, the process group it ran in and its number among that group's
// calls in the step. The same sequence number on every rank of a group names the same call: it
// starts when every rank of the group has reached it (Note [Collective start] in sim/engine.hpp)
// and its transfer time is the interconnect's to price (core/interconnect.hpp).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"

namespace memplan::sim {

enum class CollectiveKind : std::uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr int kCollectiveKindCount = 11;

/// "all_reduce", "all_gather", ... (the names trace format v3 writes).
std::string_view to_string(CollectiveKind kind);
/// A collective's name as trace format v3 writes it or as PyTorch records it in
/// `record_param_comms`'s "Collective name" or an `nccl:`/`gloo:` op (allreduce, all_reduce,
/// _allgather_base, all_gather_into_tensor, _reduce_scatter_base, reduce_scatter_tensor,
/// alltoall_base, all_to_all, broadcast, send, recv, barrier, ...); nullopt when it names none.
std::optional<CollectiveKind> parse_collective_kind(std::string_view name);

struct Collective {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Bytes in_bytes = 0;   // this rank's input message
  Bytes out_bytes = 0;  // this rank's output message
  std::string dtype;    // empty when unknown
  /// The process group's name as PyTorch gives it ("0" for the default group); empty: the
  /// default group.
  std::string group;
  /// The group's global ranks in group order; empty: every rank of the job.
  std::vector<std::int32_t> ranks;
  /// Send and recv: the global rank at the other end; -1 otherwise.
  std::int32_t peer = -1;
  /// This call's number among the calls of its group in the step, from 0.
  std::int64_t sequence = 0;

  friend bool operator==(const Collective&, const Collective&) = default;
};

/// How FSDP (FullyShardedDataParallel, FSDP2's fully_shard; ZeRO-3 alike) runs a job's sharded
/// parameters (trace format v3 `distributed.fsdp`): whether a unit's gathered parameters are freed
/// after its forward and gathered again for its backward (FULL_SHARD, reshard_after_forward) or
/// kept (SHARD_GRAD_OP), and how many units ahead backward issues a gather (BACKWARD_PRE: 1; none:
/// 0). Every plan's default for the parameters an all-gather makes (Note [FSDP's setting in a
/// plan] in core/basic_plans.hpp).
struct FsdpSetting {
  bool reshard_after_forward = true;
  std::int32_t backward_prefetch = 1;

  friend bool operator==(const FsdpSetting&, const FsdpSetting&) = default;
};

/// The step's place in a job of several ranks (trace format v3 `distributed`, PyTorch's
/// `distributedInfo`).
struct Distributed {
  std::string backend;  // "nccl", "rccl", "gloo", ... (empty when unknown)
  std::int32_t rank = 0;
  std::int32_t world_size = 1;
  /// When this rank's step started on the clock its job's ranks share (the profiler's timestamps),
  /// as recorded; nullopt when not known. Ranks start a step apart — a rank that begins early
  /// waits longer at its first collectives — and a job's replay starts each rank where it did.
  std::optional<Nanoseconds> step_start_ns;
  /// FSDP's setting of the job, when it shards its parameters and says how.
  std::optional<FsdpSetting> fsdp;

  friend bool operator==(const Distributed&, const Distributed&) = default;
};

}  // namespace memplan::sim
