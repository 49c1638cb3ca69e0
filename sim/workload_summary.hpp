#pragma once
// WorkloadSummary: what `memplan info` shows about a workload — ops per phase and layer type,
// tensors by kind, the feature maps, the in-core peak and compute time per phase.
#include <array>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/liveness.hpp"
#include "sim/workload.hpp"

namespace memplan::sim {

struct WorkloadSummary {
  struct KindTotals {
    std::size_t count = 0;
    Bytes bytes = 0;
  };
  std::size_t op_count = 0;
  std::size_t tensor_count = 0;
  std::array<std::map<std::string, std::size_t>, kPhaseCount> ops_by_layer;  // per phase
  std::array<KindTotals, kTensorKindCount> tensors_by_kind;
  std::size_t feature_map_count = 0;
  Bytes feature_map_bytes = 0;
  InCorePeak peak;
  std::array<Nanoseconds, kPhaseCount> compute_ns{};

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
