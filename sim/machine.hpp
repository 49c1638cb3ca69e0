#pragma once
// Machine: what the simulator needs to know about the hardware a plan runs on — device memory
// capacity, host-to-device and device-to-host bandwidth (full duplex: the two directions do not
// slow each other down), the fixed cost of issuing one copy, optionally the pinned host memory
// available for swapped maps, and the device memory bandwidth that prices encode/decode kernels.
// The Machine prices every instruction whose time is not in the trace: copies and codecs.
//
// A Machine starts from the DeviceInfo a trace carries and is then overridden by what-if flags
// (`--memory`, `--link`, `--h2d`, `--d2h`, `--latency`). Copies are never taken from a trace: the
// lowering creates them and the engine prices each at latency + bytes / bandwidth of its
// direction, so asking for another bandwidth rescales every copy of a recorded trace.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/units.hpp"
#include "sim/workload.hpp"

namespace memplan::sim {

struct LinkPreset {
  std::string_view name;
  BytesPerSecond bytes_per_s;  // each direction
  Nanoseconds latency_ns;      // per copy
  std::string_view description;
};

/// pcie3 (16 GB/s), pcie4 (32), pcie5 (64), nvlink2 (75, POWER9), c2c (450, Grace Hopper).
const std::vector<LinkPreset>& link_presets();
std::optional<LinkPreset> find_link_preset(std::string_view name);

/// Link used when neither the trace nor a flag names a bandwidth.
inline constexpr std::string_view kDefaultLink = "pcie3";
/// Device memory bandwidth used to price encode/decode when the trace gives none (a V100-class
/// HBM2 device sustains about this much in streaming kernels).
inline constexpr BytesPerSecond kDefaultMemoryBandwidth = 500e9;

struct Machine {
  Bytes memory_bytes = 0;
  BytesPerSecond h2d_bytes_per_s = 16e9;
  BytesPerSecond d2h_bytes_per_s = 16e9;
  Nanoseconds copy_latency_ns = 0;
  std::optional<Bytes>
      host_memory_bytes;  // pinned host memory for swapped maps; unlimited when unset
  BytesPerSecond memory_bandwidth_bytes_per_s = kDefaultMemoryBandwidth;

  /// latency + ceil(bytes / bandwidth), in nanoseconds.
  [[nodiscard]] Nanoseconds h2d_copy_ns(Bytes bytes) const;
  [[nodiscard]] Nanoseconds d2h_copy_ns(Bytes bytes) const;
  /// ceil(bytes / memory bandwidth): an encode or decode of a map of `bytes` (full size), which
  /// streams the map through device memory once.
  [[nodiscard]] Nanoseconds codec_ns(Bytes bytes) const;
};

/// What-if values given on the command line; unset ones keep the trace's value.
struct MachineOverrides {
  std::optional<Bytes> memory_bytes;
  std::optional<std::string> link;  // a preset name; sets both bandwidths and the latency
  std::optional<BytesPerSecond> h2d_bytes_per_s;
  std::optional<BytesPerSecond> d2h_bytes_per_s;
  std::optional<Nanoseconds> copy_latency_ns;
  std::optional<Bytes> host_memory_bytes;
};

/// Trace values first, then the preset of `link`, then the single values (so `--link pcie4
/// --latency 2us` takes the bandwidth of pcie4 and a 2 us latency). Missing bandwidths come from
/// kDefaultLink. Throws InputError (naming the flag) for an unknown link or a non-positive value.
Machine make_machine(const DeviceInfo& device, const MachineOverrides& overrides = {});

}  // namespace memplan::sim
