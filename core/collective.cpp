#include "core/collective.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace memplan::sim {
namespace {

constexpr std::array<std::string_view, kCollectiveKindCount> kNames = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
    "gather",     "scatter",    "send",           "recv",       "barrier",
};

// Note [PyTorch's collective names]
// A profiled c10d collective appears under several names, all folded here to one kind:
//   - `record_param_comms`'s "Collective name" arg: what ProcessGroupNCCL, ProcessGroupGloo and
//     ProcessGroupMPI pass to RECORD_PARAM_COMMS (allreduce, allreduce_coalesced, broadcast,
//     _broadcast_oop, reduce, _reduce_oop, all_gather, _allgather_base,
//     allgather_into_tensor_coalesced, reduce_scatter, _reduce_scatter_base,
//     reduce_scatter_tensor_coalesced, all_to_all, all_to_allv (with split sizes), alltoall,
//     alltoall_base, gather, scatter, send, recv, recvAnySource, barrier);
//   - the profiling title of the backend's work, prefixed "nccl:" or "gloo:" ("nccl:all_reduce",
//     "nccl:_all_gather_base", "nccl:all_reduce_barrier", and for point-to-point the peers after
//     a space: "nccl:send 0->1", "nccl:recv 1<-0"); the flight recorder lists the same names;
//   - the dispatcher ops, prefixed "c10d::" (an in-place op ends in "_": "c10d::allreduce_",
//     "c10d::_allgather_base_", "c10d::recv_any_source_") or "_c10d_functional::" for the
//     functional collectives ("all_gather_into_tensor", "reduce_scatter_tensor",
//     "all_to_all_single");
//   - the Python API's names (all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single).
// Matching ignores case (PyTorch spells both recvAnySource and recvAnysource, and the flight
// recorder ALLGATHER_coalesced). The barrier of ProcessGroupNCCL is an all-reduce of one element
// ("nccl:all_reduce_barrier"), kept as a barrier, which is what the program asked for.
constexpr std::array<std::pair<std::string_view, CollectiveKind>, 34> kPyTorchNames = {{
    {"allreduce", CollectiveKind::kAllReduce},
    {"allreduce_coalesced", CollectiveKind::kAllReduce},
    {"all_reduce_coalesced", CollectiveKind::kAllReduce},
    {"allreduce_sparse", CollectiveKind::kAllReduce},
    {"_allreduce_sparse", CollectiveKind::kAllReduce},
    {"allgather", CollectiveKind::kAllGather},
    {"_allgather_base", CollectiveKind::kAllGather},
    {"_all_gather_base", CollectiveKind::kAllGather},
    {"allgather_coalesced", CollectiveKind::kAllGather},
    {"all_gather_coalesced", CollectiveKind::kAllGather},
    {"all_gather_into_tensor", CollectiveKind::kAllGather},
    {"allgather_into_tensor_coalesced", CollectiveKind::kAllGather},
    {"all_gather_into_tensor_coalesced", CollectiveKind::kAllGather},
    {"all_gather_single", CollectiveKind::kAllGather},
    {"all_gather_v", CollectiveKind::kAllGather},
    {"_reduce_scatter_base", CollectiveKind::kReduceScatter},
    {"reduce_scatter_tensor", CollectiveKind::kReduceScatter},
    {"reduce_scatter_tensor_coalesced", CollectiveKind::kReduceScatter},
    {"reduce_scatter_coalesced", CollectiveKind::kReduceScatter},
    {"reduce_scatter_single", CollectiveKind::kReduceScatter},
    {"reduce_scatter_v", CollectiveKind::kReduceScatter},
    {"alltoall", CollectiveKind::kAllToAll},
    {"alltoall_base", CollectiveKind::kAllToAll},
    {"all_to_all_single", CollectiveKind::kAllToAll},
    {"all_to_all_v_single", CollectiveKind::kAllToAll},
    {"all_to_allv", CollectiveKind::kAllToAll},
    {"_broadcast_oop", CollectiveKind::kBroadcast},
    {"_reduce_oop", CollectiveKind::kReduce},
    {"recvanysource", CollectiveKind::kRecv},
    {"recv_any_source", CollectiveKind::kRecv},
    {"all_reduce_barrier", CollectiveKind::kBarrier},
    {"monitored_barrier", CollectiveKind::kBarrier},
    // The Python API's point-to-point calls (profiled as send and recv).
    {"isend", CollectiveKind::kSend},
    {"irecv", CollectiveKind::kRecv},
}};

constexpr std::array<std::string_view, 4> kPrefixes = {
    "nccl:", "gloo:", "c10d::", "_c10d_functional::"};

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// "nccl:send 0->1" -> "send", "c10d::allreduce_" -> "allreduce": the bare collective name.
std::string_view bare_name(std::string_view name) {
  for (const std::string_view prefix : kPrefixes) {
    if (name.starts_with(prefix)) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  if (const auto space = name.find(' '); space != std::string_view::npos) {
    name = name.substr(0, space);
  }
  if (name.size() > 1 && name.ends_with('_')) name.remove_suffix(1);
  return name;
}

}  // namespace

std::string_view to_string(CollectiveKind kind) {
  return kNames.at(static_cast<std::size_t>(kind));
}

std::optional<CollectiveKind> parse_collective_kind(std::string_view name) {
  const std::string lower = lowercase(name);
  const std::string_view bare = bare_name(lower);
  for (std::size_t k = 0; k < kNames.size(); ++k) {
    if (bare == kNames[k]) return static_cast<CollectiveKind>(k);
  }
  for (const auto& [pytorch, kind] : kPyTorchNames) {
    if (bare == pytorch) return kind;
  }
  return std::nullopt;
}

}  // namespace memplan::sim
