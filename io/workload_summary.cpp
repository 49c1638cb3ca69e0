#include "io/workload_summary.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "core/feature_maps.hpp"
#include "core/machine.hpp"

namespace memplan::sim {

std::optional<HostTimeline> host_timeline(const Workload& workload) {
  if (std::none_of(workload.ops.begin(), workload.ops.end(),
                   [](const Op& op) { return op.host.has_value(); }))
    return std::nullopt;
  HostTimeline t;
  Nanoseconds host = 0;
  Nanoseconds device = 0;
  for (const Op& op : workload.ops) {
    const HostSide side = op.host.value_or(HostSide{});
    host += side.dispatch_ns;
    t.host_busy_ns += side.dispatch_ns;
    device = std::max(device, host) + op.duration_ns;  // starts no earlier than its launch
    t.device_busy_ns += op.duration_ns;
    if (side.synchronizes) {
      host += side.sync_after_ns;
      t.host_busy_ns += side.sync_after_ns;
      host = std::max(host, device);
    }
  }
  t.host_busy_ns += workload.host_tail_ns;
  t.wall_ns = std::max(device, host + workload.host_tail_ns);
  return t;
}

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
  s.host = host_timeline(workload);
  return s;
}

namespace {

// Where each link direction comes from: the trace's own bandwidth (measured, for a trace imported
// from a profiler or recorded on a backend; given, for one written by hand or modeled) or, when
// the trace has none, the preset every command falls back to.
// The host's speed at host ops likewise: the recording machine's measurement, or the default.
nlohmann::ordered_json link_json(const Workload& workload) {
  const auto& source = workload.provenance.source;
  const bool measured = source == "imported" || source == "recorded";
  auto describe = [&](const std::optional<BytesPerSecond>& bandwidth, BytesPerSecond otherwise,
                      const char* otherwise_is) {
    if (bandwidth)
      return fmt::format("{:.2f} GB/s ({})", *bandwidth / 1e9, measured ? "measured" : "given");
    return fmt::format("{:.2f} GB/s ({})", otherwise / 1e9, otherwise_is);
  };
  const std::string preset = fmt::format("preset {}", kDefaultLink);
  const BytesPerSecond fallback = preset_link(kDefaultLink).h2d_bytes_per_s;
  nlohmann::ordered_json j;
  j["h2d"] = describe(workload.device.link.h2d_bytes_per_s, fallback, preset.c_str());
  j["d2h"] = describe(workload.device.link.d2h_bytes_per_s, fallback, preset.c_str());
  j["host_ops"] =
      describe(workload.device.host_bandwidth_bytes_per_s, kDefaultHostBandwidth, "default");
  return j;
}

}  // namespace

nlohmann::ordered_json to_json(const WorkloadSummary& s, const Workload& workload) {
  nlohmann::ordered_json j;
  j["device"] = workload.device.name;
  if (workload.device.allocator) j["allocator"] = to_string(*workload.device.allocator);
  j["provenance"] = workload.provenance.source;
  j["ops"] = s.op_count;
  j["tensors"] = s.tensor_count;
  j["feature_maps"] = s.feature_map_count;
  j["feature_map_bytes"] = s.feature_map_bytes;
  j["parameter_bytes"] = s.parameter_bytes();
  j["peak_bytes_incore"] = s.peak.bytes;
  j["no_reuse_bytes"] = no_reuse_bytes(workload);
  j["peak_op"] = s.peak.op == kNoOp ? nlohmann::ordered_json(nullptr)
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
  if (s.host) {
    nlohmann::ordered_json host;
    host["wall_s"] = to_seconds(s.host->wall_ns);
    host["host_busy_s"] = to_seconds(s.host->host_busy_ns);
    host["device_busy_s"] = to_seconds(s.host->device_busy_ns);
    host["gpu_idle_share"] = s.host->gpu_idle_share();
    host["cpu_bound"] = s.host->cpu_bound();
    if (workload.launch_ns) host["launch_s"] = to_seconds(*workload.launch_ns);
    j["host"] = std::move(host);
  }
  j["link"] = link_json(workload);
  return j;
}

std::string to_text(const WorkloadSummary& s, const Workload& workload) {
  std::string out;
  const auto& p = workload.provenance;
  out += fmt::format("device       {} ({} of memory{})\n", workload.device.name,
                     format_bytes(workload.device.memory_bytes),
                     workload.device.allocator
                         ? fmt::format(", {} allocator", to_string(*workload.device.allocator))
                         : "");
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
                     s.peak.op == kNoOp ? std::string("-") : workload.op(s.peak.op).name);
  out += "compute time";
  for (int ph = 0; ph < kPhaseCount; ++ph) {
    out += fmt::format("{} {} {:.3f} ms", ph == 0 ? "" : ",", to_string(static_cast<Phase>(ph)),
                       to_seconds(s.compute_ns[static_cast<std::size_t>(ph)]) * 1e3);
  }
  out += "\n";
  if (s.host) {
    out += fmt::format(
        "host side    in-order wall {:.3f} ms: host {:.3f} ms, device {:.3f} ms, GPU idle {:.1f}% "
        "of the step, {}\n",
        to_seconds(s.host->wall_ns) * 1e3, to_seconds(s.host->host_busy_ns) * 1e3,
        to_seconds(s.host->device_busy_ns) * 1e3, 100.0 * s.host->gpu_idle_share(),
        s.host->cpu_bound() ? "CPU-bound" : "GPU-bound");
  }
  out += "link        ";
  const nlohmann::ordered_json link = link_json(workload);
  for (const auto& [direction, source] : link.items()) {
    out += fmt::format(" {} {}", direction, source.get<std::string>());
  }
  out += "\n";
  return out;
}

}  // namespace memplan::sim
