#include "sim/workload_summary.hpp"

#include <fmt/core.h>

#include "sim/feature_maps.hpp"

namespace memplan::sim {

WorkloadSummary summarize(const Workload& workload) {
  WorkloadSummary s;
  s.op_count = workload.ops.size();
  s.tensor_count = workload.tensors.size();
  for (const Op& op : workload.ops) {
    const auto phase = static_cast<std::size_t>(op.phase);
    ++s.ops_by_layer[phase][op.layer.str()];
    s.compute_ns[phase] += op.duration_ns;
  }
  for (const Tensor& t : workload.tensors) {
    auto& totals = s.tensors_by_kind[static_cast<std::size_t>(t.kind)];
    ++totals.count;
    totals.bytes += t.bytes;
  }
  for (const FeatureMap& fm : find_feature_maps(workload)) {
    ++s.feature_map_count;
    s.feature_map_bytes += workload.tensor(fm.tensor).bytes;
  }
  s.peak = incore_peak(workload);
  return s;
}

nlohmann::ordered_json to_json(const WorkloadSummary& s, const Workload& workload) {
  nlohmann::ordered_json j;
  j["device"] = workload.device.name;
  j["provenance"] = workload.provenance.source;
  j["ops"] = s.op_count;
  j["tensors"] = s.tensor_count;
  j["feature_maps"] = s.feature_map_count;
  j["feature_map_bytes"] = s.feature_map_bytes;
  j["parameter_bytes"] = s.parameter_bytes();
  j["peak_bytes_incore"] = s.peak.bytes;
  j["no_reuse_bytes"] = no_reuse_bytes(workload);
  j["peak_op"] = s.peak.op == kNoId ? nlohmann::ordered_json(nullptr)
                                    : nlohmann::ordered_json(workload.op(s.peak.op).name);
  nlohmann::ordered_json compute = nlohmann::ordered_json::object();
  nlohmann::ordered_json by_layer = nlohmann::ordered_json::object();
  for (int p = 0; p < kPhaseCount; ++p) {
    const auto phase = std::string(to_string(static_cast<Phase>(p)));
    compute[phase] = to_seconds(s.compute_ns[static_cast<std::size_t>(p)]);
    by_layer[phase] = nlohmann::ordered_json::object();
    for (const auto& [layer, count] : s.ops_by_layer[static_cast<std::size_t>(p)])
      by_layer[phase][layer] = count;
  }
  j["compute_s"] = std::move(compute);
  j["ops_by_phase_and_layer"] = std::move(by_layer);
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  for (int k = 0; k < kTensorKindCount; ++k) {
    const auto& totals = s.tensors_by_kind[static_cast<std::size_t>(k)];
    kinds[std::string(to_string(static_cast<TensorKind>(k)))] = {{"count", totals.count},
                                                                 {"bytes", totals.bytes}};
  }
  j["tensors_by_kind"] = std::move(kinds);
  return j;
}

std::string to_text(const WorkloadSummary& s, const Workload& workload) {
  std::string out;
  const auto& p = workload.provenance;
  out += fmt::format("device       {} ({} of memory)\n", workload.device.name,
                     format_bytes(workload.device.memory_bytes));
  out += fmt::format("provenance   {}{}{}\n", p.source, p.file.empty() ? "" : " from " + p.file,
                     p.cost_model.empty() ? "" : " by " + p.cost_model);
  out += fmt::format("ops          {}\n", s.op_count);
  for (int ph = 0; ph < kPhaseCount; ++ph) {
    const auto& layers = s.ops_by_layer[static_cast<std::size_t>(ph)];
    if (layers.empty()) continue;
    std::size_t total = 0;
    std::string detail;
    for (const auto& [layer, count] : layers) {
      total += count;
      detail += fmt::format("{}{} {}", detail.empty() ? "" : ", ", count, layer);
    }
    out += fmt::format("  {:<9} {:>6}  ({})\n", to_string(static_cast<Phase>(ph)), total, detail);
  }
  out += fmt::format("tensors      {}\n", s.tensor_count);
  for (int k = 0; k < kTensorKindCount; ++k) {
    const auto& totals = s.tensors_by_kind[static_cast<std::size_t>(k)];
    if (totals.count == 0) continue;
    out += fmt::format("  {:<16} {:>6}  {:>12}\n", to_string(static_cast<TensorKind>(k)),
                       totals.count, format_bytes(totals.bytes));
  }
  out +=
      fmt::format("feature maps {} ({})\n", s.feature_map_count, format_bytes(s.feature_map_bytes));
  out += fmt::format("in-core peak {} at op '{}'\n", format_bytes(s.peak.bytes),
                     s.peak.op == kNoId ? std::string("-") : workload.op(s.peak.op).name);
  out += "compute time";
  for (int ph = 0; ph < kPhaseCount; ++ph) {
    out += fmt::format("{} {} {:.3f} ms", ph == 0 ? "" : ",", to_string(static_cast<Phase>(ph)),
                       to_seconds(s.compute_ns[static_cast<std::size_t>(ph)]) * 1e3);
  }
  out += "\n";
  return out;
}

}  // namespace memplan::sim
