#include "io/workload_summary.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "core/collective_cost.hpp"
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
  s.ops_by_stream.assign(std::max<std::size_t>(1, workload.streams.size()), 0);
  const std::int32_t world = workload.distributed ? workload.distributed->world_size : 1;
  std::map<CollectiveKind, std::vector<BytesPerSecond>> bandwidths;
  for (const Op& op : workload.ops) {
    ++s.ops_by_stream[static_cast<std::size_t>(op.stream)];
    if (!op.collective) continue;
    auto& totals = s.collectives[op.collective->kind];
    ++totals.calls;
    totals.bytes += std::max(op.collective->in_bytes, op.collective->out_bytes);
    totals.recorded_ns = add_ns(totals.recorded_ns, op.duration_ns);
    if (auto bw = bus_bandwidth(*op.collective, world, op.duration_ns))
      bandwidths[op.collective->kind].push_back(*bw);
  }
  for (auto& [kind, values] : bandwidths) {
    std::sort(values.begin(), values.end());
    s.collectives[kind].median_bus_bandwidth = values[(values.size() - 1) / 2];
  }
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
  if (workload.distributed) {
    j["distributed"] = {{"backend", workload.distributed->backend},
                        {"rank", workload.distributed->rank},
                        {"world_size", workload.distributed->world_size}};
  }
  if (s.ops_by_stream.size() > 1) j["ops_by_stream"] = s.ops_by_stream;
  if (!s.collectives.empty()) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::object();
    for (const auto& [kind, t] : s.collectives) {
      calls[std::string(to_string(kind))] = {
          {"calls", t.calls},
          {"bytes", t.bytes},
          {"recorded_s", to_seconds(t.recorded_ns)},
          {"median_bus_bytes_per_s", t.median_bus_bandwidth ? nlohmann::ordered_json(*t.median_bus_bandwidth)
                                                           : nlohmann::ordered_json(nullptr)}};
    }
    j["collectives"] = std::move(calls);
  }
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

namespace {

// The fabric presets of one kind, "nvlink3 300, nvlink4 450, ..." in GB/s.
std::string presets_text(bool between_nodes) {
  std::string out;
  for (const FabricPreset& p : fabric_presets()) {
    if (p.between_nodes != between_nodes) continue;
    out += fmt::format("{}{} {:.0f}", out.empty() ? "" : ", ", p.name, p.fabric.bytes_per_s / 1e9);
  }
  return out;
}

// The rank, the device streams and the collectives of a step that ran on several GPUs: what each
// kind of collective moved and the bus bandwidth its recorded transfers achieved, against the
// fabric presets (GB/s) a what-if would price it with.
std::string parallel_text(const WorkloadSummary& s, const Workload& workload) {
  std::string out;
  if (const auto& d = workload.distributed) {
    out += fmt::format("rank         {} of {}{}\n", d->rank, d->world_size,
                       d->backend.empty() ? "" : " (" + d->backend + ")");
  }
  if (s.ops_by_stream.size() > 1) {
    out += fmt::format("streams      {}:", s.ops_by_stream.size());
    for (std::size_t i = 0; i < s.ops_by_stream.size(); ++i) {
      const std::string label = i < workload.streams.size() ? workload.streams[i] : "";
      out += fmt::format("{} {} ({} ops)", i == 0 ? "" : ",", label.empty() ? std::to_string(i) : label,
                         s.ops_by_stream[i]);
    }
    out += "\n";
  }
  for (const auto& [kind, t] : s.collectives) {
    out += fmt::format("collective   {}: {} calls, {}, {:.3f} ms recorded", to_string(kind), t.calls,
                       format_bytes(t.bytes), to_seconds(t.recorded_ns) * 1e3);
    if (t.median_bus_bandwidth)
      out += fmt::format(", bus bandwidth {:.1f} GB/s (median)", *t.median_bus_bandwidth / 1e9);
    out += "\n";
  }
  if (!s.collectives.empty()) {
    out += fmt::format("fabrics      presets in GB/s within a node: {}; between nodes: {}\n",
                       presets_text(false), presets_text(true));
  }
  return out;
}

}  // namespace

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
  out += parallel_text(s, workload);
  out += "link        ";
  const nlohmann::ordered_json link = link_json(workload);
  for (const auto& [direction, source] : link.items()) {
    out += fmt::format(" {} {}", direction, source.get<std::string>());
  }
  out += "\n";
  return out;
}

}  // namespace memplan::sim
