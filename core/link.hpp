#pragma once
// Link: the copy link between device memory and host memory — bandwidth in each direction (full
// duplex: the two directions do not slow each other down) and the fixed cost of issuing one copy.
// One type wherever a link is known: a preset (`--link pcie4`), a backend's measurement (record,
// --calibrate), the Machine that prices every copy (core/machine.hpp).
//
// PartialLink is the same link with each value known or not: what a trace's device records (an
// imported profiler trace measures the bandwidths of the directions it copied, never a latency)
// and what what-if flags ask for. `over` fills its unknown values from a complete Link, so a link
// flows from a trace, through a preset and flags, into a Machine without copying field by field.
#include <optional>
#include <string_view>
#include <vector>

#include "core/units.hpp"

namespace memplan::sim {

struct Link {
  BytesPerSecond h2d_bytes_per_s = 0;
  BytesPerSecond d2h_bytes_per_s = 0;
  Nanoseconds latency_ns = 0;  // per copy

  friend bool operator==(const Link&, const Link&) = default;
};

struct PartialLink {
  std::optional<BytesPerSecond> h2d_bytes_per_s;
  std::optional<BytesPerSecond> d2h_bytes_per_s;
  std::optional<Nanoseconds> latency_ns;

  PartialLink() = default;
  /// Every value known (implicit: a complete link is a partial one that knows everything).
  PartialLink(const Link& link)
      : h2d_bytes_per_s(link.h2d_bytes_per_s),
        d2h_bytes_per_s(link.d2h_bytes_per_s),
        latency_ns(link.latency_ns) {}

  /// True when a bandwidth of either direction is known.
  [[nodiscard]] bool has_bandwidth() const { return h2d_bytes_per_s || d2h_bytes_per_s; }
  /// The known values of this link, the others from `base`.
  [[nodiscard]] Link over(const Link& base) const {
    return {h2d_bytes_per_s.value_or(base.h2d_bytes_per_s),
            d2h_bytes_per_s.value_or(base.d2h_bytes_per_s), latency_ns.value_or(base.latency_ns)};
  }

  friend bool operator==(const PartialLink&, const PartialLink&) = default;
};

struct LinkPreset {
  std::string_view name;
  Link link;  // the same bandwidth each way
  std::string_view description;
};

/// pcie3 (16 GB/s), pcie4 (32), pcie5 (64), nvlink2 (75, POWER9), c2c (450, Grace Hopper).
const std::vector<LinkPreset>& link_presets();
std::optional<LinkPreset> find_link_preset(std::string_view name);
/// The link of the preset `name`; throws InputError naming `--link` and the known presets.
Link preset_link(std::string_view name);

/// Link used when neither the trace nor a flag names a bandwidth.
inline constexpr std::string_view kDefaultLink = "pcie3";
/// The name `--link` takes, beside the presets, for the trace's own measured link.
inline constexpr std::string_view kRecordedLink = "recorded";

}  // namespace memplan::sim
