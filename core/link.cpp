#include "core/link.hpp"

#include <string>

#include <fmt/format.h>

#include "core/input_error.hpp"

namespace memplan::sim {

const std::vector<LinkPreset>& link_presets() {
  // Latencies are the usual cost of one cudaMemcpyAsync on such a link (launch plus DMA setup).
  static const std::vector<LinkPreset> presets = {
      {"pcie3", {16e9, 16e9, 10'000}, "PCIe 3.0 x16"},
      {"pcie4", {32e9, 32e9, 8'000}, "PCIe 4.0 x16"},
      {"pcie5", {64e9, 64e9, 6'000}, "PCIe 5.0 x16"},
      {"nvlink2", {75e9, 75e9, 5'000}, "NVLink 2.0 CPU-GPU (IBM POWER9)"},
      {"c2c", {450e9, 450e9, 2'000}, "NVLink-C2C (Grace Hopper)"},
  };
  return presets;
}

std::optional<LinkPreset> find_link_preset(std::string_view name) {
  for (const LinkPreset& p : link_presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

Link preset_link(std::string_view name) {
  if (const auto preset = find_link_preset(name)) return preset->link;
  std::string names;
  for (const LinkPreset& p : link_presets())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  throw InputError("--link", fmt::format("unknown link '{}' (known: {})", name, names));
}

}  // namespace memplan::sim
