#pragma once
// Interconnect: the links that carry a multi-GPU step's collectives (core/collective.hpp) — one
// fabric between the GPUs of a node (NVLink, PCIe peer-to-peer, AMD's Infinity Fabric) and one
// between nodes (InfiniBand, RoCE), each a bandwidth and a per-step latency, and how many GPUs a
// node holds. The Machine prices a collective over it (core/collective_cost.hpp) when the user asks
// for one (`--interconnect`, `--network`, `--gpus-per-node`); without one every collective keeps
// the time the trace recorded. Presets carry vendors' numbers, so that "what if this step ran on
// H100s over NDR" is one flag.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"

namespace memplan::sim {

/// One fabric between GPUs: the bandwidth one GPU sends at in each direction (bus bandwidth as
/// nccl-tests reports it) and the latency of one step of an algorithm over it.
struct Fabric {
  BytesPerSecond bytes_per_s = 0;
  Nanoseconds latency_ns = 0;

  friend bool operator==(const Fabric&, const Fabric&) = default;
};

/// GPUs in a node when `--gpus-per-node` is not given: the 8 of a DGX/HGX server.
inline constexpr std::int32_t kDefaultGpusPerNode = 8;
/// The most GPUs `--gpus-per-node` takes.
inline constexpr std::int32_t kMaxGpusPerNode = 1024;

struct Interconnect {
  std::string name;  // "nvlink4 + ib-ndr", or "nvlink4" when no network is named
  Fabric intra;      // between GPUs of one node
  Fabric inter;      // between nodes, one GPU's share of its node's network
  std::int32_t gpus_per_node = kDefaultGpusPerNode;

  friend bool operator==(const Interconnect&, const Interconnect&) = default;
};

struct FabricPreset {
  std::string_view name;
  Fabric fabric;
  bool between_nodes = false;  // a network (--network), else a fabric inside a node
  std::string_view description;
};

/// Inside a node: nvlink3 (A100, 300 GB/s each way), nvlink4 (H100, 450), nvlink5 (B200, 900),
/// pcie4-p2p (25), pcie5-p2p (50), xgmi (MI300X, 448); between nodes, one NIC per GPU: ib-hdr
/// (25 GB/s), ib-ndr (50), roce-400g (50). Sources in core/interconnect.cpp.
const std::vector<FabricPreset>& fabric_presets();
std::optional<FabricPreset> find_fabric_preset(std::string_view name);

/// The name `--interconnect` takes, beside the presets, for "keep every collective's recorded
/// time" (Machine::interconnect stays unset).
inline constexpr std::string_view kRecordedInterconnect = "recorded";

/// The interconnect of the intra-node preset `intra` and the network preset `inter`. Without a
/// network the intra-node fabric joins every GPU of the job (one NVLink domain of any size, as
/// NVIDIA's NVL72 racks are): nodes still split ranks but the link between them is the fabric's.
/// Throws InputError naming `--interconnect`, `--network` or `--gpus-per-node` for an unknown
/// preset (listing the known ones), a network given as the intra-node fabric or the other way
/// round, or a gpus_per_node outside 1..kMaxGpusPerNode.
Interconnect make_interconnect(std::string_view intra, std::optional<std::string_view> inter,
                               std::int32_t gpus_per_node);

/// "nvlink3, nvlink4, ..." (between_nodes false) or "ib-hdr, ib-ndr, roce-400g" (true), for help
/// texts and errors.
std::string fabric_preset_names(bool between_nodes);

}  // namespace memplan::sim
