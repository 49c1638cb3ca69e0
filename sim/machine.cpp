#include "sim/machine.hpp"

#include <cmath>

#include <fmt/format.h>

#include "sim/input_error.hpp"

namespace memplan::sim {

const std::vector<LinkPreset>& link_presets() {
  // Latencies are the usual cost of one cudaMemcpyAsync on such a link (launch plus DMA setup).
  static const std::vector<LinkPreset> presets = {
      {"pcie3", 16e9, 10'000, "PCIe 3.0 x16"},
      {"pcie4", 32e9, 8'000, "PCIe 4.0 x16"},
      {"pcie5", 64e9, 6'000, "PCIe 5.0 x16"},
      {"nvlink2", 75e9, 5'000, "NVLink 2.0 CPU-GPU (IBM POWER9)"},
      {"c2c", 450e9, 2'000, "NVLink-C2C (Grace Hopper)"},
  };
  return presets;
}

std::optional<LinkPreset> find_link_preset(std::string_view name) {
  for (const LinkPreset& p : link_presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

namespace {
// Saturating (sim/units.hpp): a crawling link or a huge latency gives kMaxNanoseconds, never an
// overflow.
Nanoseconds copy_ns(Nanoseconds latency, Bytes bytes, BytesPerSecond bandwidth) {
  return add_ns(latency, transfer_ns(bytes, bandwidth));
}
}  // namespace

Nanoseconds Machine::h2d_copy_ns(Bytes bytes) const {
  return copy_ns(copy_latency_ns, bytes, h2d_bytes_per_s);
}
Nanoseconds Machine::d2h_copy_ns(Bytes bytes) const {
  return copy_ns(copy_latency_ns, bytes, d2h_bytes_per_s);
}
Nanoseconds Machine::codec_ns(Bytes bytes) const {
  return copy_ns(0, bytes, memory_bandwidth_bytes_per_s);
}

Machine make_machine(const DeviceInfo& device, const MachineOverrides& overrides) {
  const LinkPreset fallback = *find_link_preset(kDefaultLink);
  Machine m;
  m.memory_bytes = device.memory_bytes;
  m.h2d_bytes_per_s = device.h2d_bytes_per_s.value_or(fallback.bytes_per_s);
  m.d2h_bytes_per_s = device.d2h_bytes_per_s.value_or(fallback.bytes_per_s);
  m.copy_latency_ns = device.copy_latency_ns.value_or(
      device.h2d_bytes_per_s || device.d2h_bytes_per_s ? 0 : fallback.latency_ns);
  m.memory_bandwidth_bytes_per_s =
      device.memory_bandwidth_bytes_per_s.value_or(kDefaultMemoryBandwidth);
  if (overrides.link) {
    const auto preset = find_link_preset(*overrides.link);
    if (!preset) {
      std::string names;
      for (const LinkPreset& p : link_presets())
        names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
      throw InputError("--link",
                       fmt::format("unknown link '{}' (known: {})", *overrides.link, names));
    }
    m.h2d_bytes_per_s = preset->bytes_per_s;
    m.d2h_bytes_per_s = preset->bytes_per_s;
    m.copy_latency_ns = preset->latency_ns;
  }
  if (overrides.memory_bytes) m.memory_bytes = *overrides.memory_bytes;
  if (overrides.h2d_bytes_per_s) m.h2d_bytes_per_s = *overrides.h2d_bytes_per_s;
  if (overrides.d2h_bytes_per_s) m.d2h_bytes_per_s = *overrides.d2h_bytes_per_s;
  if (overrides.copy_latency_ns) m.copy_latency_ns = *overrides.copy_latency_ns;
  if (overrides.host_memory_bytes) m.host_memory_bytes = *overrides.host_memory_bytes;
  if (m.memory_bytes <= 0) {
    // Name what set it: the flag when given, the trace otherwise (a flag never given is no help).
    if (overrides.memory_bytes) throw InputError("--memory", "device memory must be positive");
    throw InputError("the trace's device",
                     fmt::format("device memory is {} bytes: give --memory (e.g. --memory 16GiB)",
                                 m.memory_bytes));
  }
  if (!(m.h2d_bytes_per_s > 0)) throw InputError("--h2d", "bandwidth must be positive");
  if (!(m.d2h_bytes_per_s > 0)) throw InputError("--d2h", "bandwidth must be positive");
  if (m.copy_latency_ns < 0) throw InputError("--latency", "latency must not be negative");
  return m;
}

}  // namespace memplan::sim
