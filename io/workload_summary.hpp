#pragma once
// WorkloadSummary: what `memplan info` shows about a workload — ops per phase and layer type,
// tensors by kind, the feature maps, the in-core peak and compute time per phase; for a trace with
// a host side (format v2), the GPU's idle share of the step and whether the step is CPU-bound.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/liveness.hpp"
#include "core/workload.hpp"

namespace memplan::sim {

/// The step in issue order with the host as a stream of its own (HostSide's semantics in
/// core/workload.hpp), the device running one op at a time: the in-order estimate of the step's
/// wall time that the host side alone gives.
struct HostTimeline {
  Nanoseconds wall_ns = 0;         // max(device end, host end + host tail)
  Nanoseconds device_busy_ns = 0;  // sum of op durations
  Nanoseconds host_busy_ns = 0;    // sum of dispatch times + host tail (waits excluded)
  /// Share of the wall time the device has nothing to run.
  [[nodiscard]] double gpu_idle_share() const {
    return wall_ns > 0 ? 1.0 - static_cast<double>(device_busy_ns) / static_cast<double>(wall_ns)
                       : 0.0;
  }
  /// The host's own work takes longer than the device's: a faster device would not help.
  [[nodiscard]] bool cpu_bound() const { return host_busy_ns > device_busy_ns; }
};

/// nullopt when no op has a host side.
std::optional<HostTimeline> host_timeline(const Workload& workload);

struct WorkloadSummary {
  struct KindTotals {
    std::size_t count = 0;
    Bytes bytes = 0;
  };
  /// A step's collectives of one kind, as recorded: calls, bytes (the larger side of each), the
  /// recorded transfer time, and the median bus bandwidth those transfers achieved
  /// (core/collective_cost.hpp bus_bandwidth), to read against the fabric presets.
  struct CollectiveTotals {
    std::size_t calls = 0;
    Bytes bytes = 0;
    Nanoseconds recorded_ns = 0;
    std::optional<BytesPerSecond> median_bus_bandwidth;
  };
  std::size_t op_count = 0;
  std::size_t tensor_count = 0;
  std::array<std::map<std::string, std::size_t>, kPhaseCount> ops_by_layer;  // per phase
  std::array<KindTotals, kTensorKindCount> tensors_by_kind;
  std::size_t feature_map_count = 0;
  Bytes feature_map_bytes = 0;
  InCorePeak peak;
  std::array<Nanoseconds, kPhaseCount> compute_ns{};
  std::optional<HostTimeline> host;
  /// Ops per device stream (Workload::streams; one entry when every op runs on stream 0).
  std::vector<std::size_t> ops_by_stream;
  std::map<CollectiveKind, CollectiveTotals> collectives;

  [[nodiscard]] Bytes parameter_bytes() const {
    return tensors_by_kind[static_cast<std::size_t>(TensorKind::kParameter)].bytes;
  }
};

/// Requires a validated workload.
WorkloadSummary summarize(const Workload& workload);

/// The `memplan info --json` object (keys documented in traces/FORMAT.md).
nlohmann::ordered_json to_json(const WorkloadSummary& summary, const Workload& workload);

/// The human-readable `memplan info` report.
std::string to_text(const WorkloadSummary& summary, const Workload& workload);

}  // namespace memplan::sim
