#include "core/interconnect.hpp"

#include <fmt/format.h>

#include "core/input_error.hpp"

namespace memplan::sim {

// Note [Fabric presets]
// Bandwidths are what one GPU sends at in each direction, from the vendors' datasheets (which
// quote both directions together, so half of their figure), or for PCIe what peer-to-peer
// transfers achieve (nccl-tests' bus bandwidth on servers without NVLink; the 32 and 64 GB/s of
// the PCIe 4 and 5 x16 links are never reached through the root complex or a switch).
// Latencies are those of one step of a ring or a tree, in the range NCCL's own tuning model
// (src/graph/tuning.cc, its hwLat table) gives a step of its low-latency protocols: about 2 us
// over NVLink (1.9 us for a ring step of LL128), 2.5 us over PCIe, and 5 us over the network
// (4 us for a ring step of LL128, 5 for a tree step of LL, before the NIC's own latency). RCCL
// prices xGMI as NCCL prices NVLink. The model does not tell RoCE's latency from InfiniBand's.
const std::vector<FabricPreset>& fabric_presets() {
  static const std::vector<FabricPreset> presets = {
      {"nvlink3",
       {300e9, 2'000},
       false,
       "NVLink 3 (A100 SXM): 12 links, 300 GB/s each way (datasheet: 600 GB/s both ways)"},
      {"nvlink4",
       {450e9, 2'000},
       false,
       "NVLink 4 (H100 SXM): 18 links, 450 GB/s each way (datasheet: 900 GB/s both ways)"},
      {"nvlink5",
       {900e9, 2'000},
       false,
       "NVLink 5 (B200): 18 links, 900 GB/s each way (datasheet: 1.8 TB/s both ways)"},
      {"pcie4-p2p",
       {25e9, 2'500},
       false,
       "PCIe 4.0 x16 peer-to-peer: about 25 GB/s achieved of the link's 32 GB/s"},
      {"pcie5-p2p",
       {50e9, 2'500},
       false,
       "PCIe 5.0 x16 peer-to-peer: about 50 GB/s achieved of the link's 64 GB/s"},
      {"xgmi",
       {448e9, 2'000},
       false,
       "AMD Infinity Fabric (MI300X): 7 links x 64 GB/s = 448 GB/s each way (datasheet: 896 GB/s "
       "both ways)"},
      {"ib-hdr",
       {25e9, 5'000},
       true,
       "InfiniBand HDR, one 200 Gb/s NIC per GPU (ConnectX-6, as in DGX A100): 25 GB/s"},
      {"ib-ndr",
       {50e9, 5'000},
       true,
       "InfiniBand NDR, one 400 Gb/s NIC per GPU (ConnectX-7, as in DGX H100): 50 GB/s"},
      {"roce-400g",
       {50e9, 5'000},
       true,
       "RoCE v2 over 400 Gb/s Ethernet, one NIC per GPU: 50 GB/s"},
  };
  return presets;
}

std::optional<FabricPreset> find_fabric_preset(std::string_view name) {
  for (const FabricPreset& p : fabric_presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::string fabric_preset_names(bool between_nodes) {
  std::string names;
  for (const FabricPreset& p : fabric_presets()) {
    if (p.between_nodes != between_nodes) continue;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  }
  return names;
}

namespace {

// The preset `name` for `flag`, which takes networks when `between_nodes`.
Fabric fabric_for(std::string_view name, bool between_nodes, const char* flag) {
  const auto preset = find_fabric_preset(name);
  if (!preset) {
    throw InputError(
        flag,
        fmt::format("unknown {} '{}' (known: {}{})", between_nodes ? "network" : "fabric", name,
                    fabric_preset_names(between_nodes), between_nodes ? "" : "; or recorded"));
  }
  if (preset->between_nodes != between_nodes) {
    throw InputError(
        flag, between_nodes ? fmt::format("'{}' joins the GPUs of one node: give it to "
                                          "--interconnect, and here a network ({})",
                                          name, fabric_preset_names(true))
                            : fmt::format("'{}' is a network between nodes: give it to --network, "
                                          "and here the fabric inside a node ({})",
                                          name, fabric_preset_names(false)));
  }
  return preset->fabric;
}

}  // namespace

Interconnect make_interconnect(std::string_view intra, std::optional<std::string_view> inter,
                               std::int32_t gpus_per_node) {
  if (gpus_per_node < 1 || gpus_per_node > kMaxGpusPerNode) {
    throw InputError("--gpus-per-node", fmt::format("{} is not a whole number from 1 to {}",
                                                    gpus_per_node, kMaxGpusPerNode));
  }
  Interconnect net;
  net.intra = fabric_for(intra, false, "--interconnect");
  net.inter = inter ? fabric_for(*inter, true, "--network") : net.intra;
  net.name = inter ? fmt::format("{} + {}", intra, *inter) : std::string(intra);
  net.gpus_per_node = gpus_per_node;
  return net;
}

}  // namespace memplan::sim
