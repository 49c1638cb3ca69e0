#include "importers/snapshot/snapshot_report.hpp"

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.hpp"

namespace memplan::importers {

namespace {

nlohmann::json settings_json(const AllocatorSettings& s) {
  nlohmann::json divisions = nlohmann::json::object();
  for (const auto& [mib, n] : s.roundup_power2_divisions) divisions[std::to_string(mib)] = n;
  return {{"PYTORCH_CUDA_ALLOC_CONF", s.alloc_conf},
          {"max_split_size", s.max_split_size},
          {"garbage_collection_threshold", s.garbage_collection_threshold},
          {"expandable_segments", s.expandable_segments},
          {"roundup_power2_divisions", divisions}};
}

nlohmann::json history_json(const SnapshotHistory& h) {
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  return {{"device", h.device},
          {"segments", h.segments},
          {"largest_segment_bytes", h.largest_segment},
          {"reserved_bytes", h.reserved_at_end},
          {"allocated_bytes", h.allocated_at_end},
          {"requested_bytes", h.requested_at_end},
          {"events", h.events},
          {"actions", h.actions},
          {"event_sizes", h.events_give_requests ? "requested" : "block"},
          {"live_bytes_at_first_event", h.live_at_first_event},
          {"peak_live_bytes", h.peak_live},
          {"peak_live_event", h.peak_live_event},
          {"reserved_bytes_at_first_event", h.reserved_at_first_event},
          {"peak_reserved_bytes", h.peak_reserved},
          {"first_time_us", optional(h.first_us)},
          {"last_time_us", optional(h.last_us)}};
}

nlohmann::json replay_json(const AllocatorReplay& r) {
  const auto index = [](const std::optional<std::size_t>& i) {
    return i ? nlohmann::json(*i) : nlohmann::json(nullptr);
  };
  return {{"reserved_bytes", r.reserved_at_end},
          {"allocated_bytes", r.allocated_at_end},
          {"peak_reserved_bytes", r.peak_reserved},
          {"peak_allocated_bytes", r.peak_allocated},
          {"segments", r.segments_at_end},
          {"seeded_segments", r.seeded_segments},
          {"seeded_blocks", r.seeded_blocks},
          {"allocations", r.allocations},
          {"placed_as_recorded", r.placed_as_recorded},
          {"first_misplaced_event", index(r.first_misplaced)},
          {"first_reserved_mismatch_event", index(r.first_reserved_mismatch)},
          {"segments_kept", r.segments_kept},
          {"ooms", r.ooms},
          {"ooms_reproduced", r.ooms_reproduced},
          {"first_oom_served_event", index(r.first_oom_served)},
          {"failed_allocations", r.failed_allocs},
          {"differences", r.differences}};
}

std::string replay_text(const SnapshotHistory& h, const AllocatorReplay& r) {
  std::string out = fmt::format(
      "  the caching-allocator model, the events replayed from the {} segments and {} blocks held "
      "at the first event{}: reserved {} at the end (snapshot {}), peak {} (snapshot {}); "
      "allocated {} (snapshot {}); {} segments (snapshot {})\n",
      r.seeded_segments, r.seeded_blocks,
      r.failed_allocs > 0 ? fmt::format(", {} requests failed", r.failed_allocs) : "",
      sim::format_bytes(r.reserved_at_end), sim::format_bytes(h.reserved_at_end),
      sim::format_bytes(r.peak_reserved), sim::format_bytes(h.peak_reserved),
      sim::format_bytes(r.allocated_at_end), sim::format_bytes(h.allocated_at_end),
      r.segments_at_end, h.segments);
  out += fmt::format(
      "    {} of {} allocations placed at the address PyTorch gave them{}; reserved bytes {}\n",
      r.placed_as_recorded, r.allocations,
      r.first_misplaced ? fmt::format(" (the first elsewhere: event {})", *r.first_misplaced) : "",
      r.first_reserved_mismatch ? fmt::format("differ from event {} on", *r.first_reserved_mismatch)
                                : std::string("equal after every event"));
  if (r.ooms > 0) {
    out += fmt::format(
        "    {} of {} out-of-memory events failed by the model too, with the free memory each "
        "records{}\n",
        r.ooms_reproduced, r.ooms,
        r.first_oom_served
            ? fmt::format(" (event {} the model would have served)", *r.first_oom_served)
            : "");
  }
  for (const std::string& d : r.differences) out += fmt::format("    not modelled: {}\n", d);
  return out;
}

const SnapshotTraceJoin* join_of(const SnapshotReport& report, std::int64_t device) {
  for (const SnapshotTraceJoin& j : report.joins) {
    if (j.device == device) return &j;
  }
  return nullptr;
}

constexpr std::size_t kOpsShown = 10;

std::string join_text(const SnapshotReport& report, const SnapshotTraceJoin& j) {
  std::string out = fmt::format(
      "  joined with {} by time: {} of the {} allocations in its span made inside an op ({})\n",
      report.trace, j.attributed, j.in_span, sim::format_bytes(j.attributed_bytes));
  for (std::size_t i = 0; i < std::min(kOpsShown, j.by_op.size()); ++i) {
    const OpAllocations& a = j.by_op[i];
    out += fmt::format("    {:>10}  {:>6} allocations  {}\n", sim::format_bytes(a.bytes),
                       a.allocations, a.op);
  }
  if (j.by_op.size() > kOpsShown) {
    out +=
        fmt::format("    ... {} ops more (--json lists every one)\n", j.by_op.size() - kOpsShown);
  }
  return out;
}

nlohmann::json join_json(const SnapshotReport& report, const SnapshotTraceJoin& j) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpAllocations& a : j.by_op) {
    ops.push_back({{"op", a.op}, {"allocations", a.allocations}, {"bytes", a.bytes}});
  }
  return {{"trace", report.trace},
          {"allocations_in_span", j.in_span},
          {"attributed", j.attributed},
          {"attributed_bytes", j.attributed_bytes},
          {"by_op", ops}};
}

}  // namespace

SnapshotReport report_snapshot(const std::filesystem::path& path,
                               const std::filesystem::path& trace) {
  SnapshotReport r;
  r.file = path.string();
  r.snapshot = read_memory_snapshot(path);
  r.histories = snapshot_histories(r.snapshot);
  for (const SnapshotHistory& h : r.histories) r.replays.push_back(replay_allocator(r.snapshot, h));
  if (!trace.empty()) {
    r.trace = trace.string();
    r.joins = join_with_trace(r.snapshot, trace);
  }
  return r;
}

std::string snapshot_text(const SnapshotReport& report) {
  const MemorySnapshot& s = report.snapshot;
  std::string out = fmt::format("snapshot {}: {} segments, {} devices with events\n", report.file,
                                s.segments.size(), s.device_traces.size());
  if (s.settings) {
    const AllocatorSettings& a = *s.settings;
    out += fmt::format(
        "allocator: PYTORCH_CUDA_ALLOC_CONF '{}', max_split_size {}, expandable segments {}, "
        "garbage collection threshold {:g}, roundup_power2_divisions {}\n",
        a.alloc_conf,
        a.max_split_size < 0 ? std::string("none") : sim::format_bytes(a.max_split_size),
        a.expandable_segments ? "yes" : "no", a.garbage_collection_threshold,
        a.roundup_power2_divisions.empty() ? std::string("none")
                                           : fmt::format("{}", a.roundup_power2_divisions));
  } else {
    out += fmt::format("allocator: settings not recorded (PyTorch before 2.4)\n");
  }
  for (std::size_t i = 0; i < report.histories.size(); ++i) {
    const SnapshotHistory& h = report.histories[i];
    out += fmt::format(
        "device {}: {} segments ({} reserved, the largest {}); at the dump {} allocated in blocks "
        "({} requested)\n",
        h.device, h.segments, sim::format_bytes(h.reserved_at_end),
        sim::format_bytes(h.largest_segment), sim::format_bytes(h.allocated_at_end),
        sim::format_bytes(h.requested_at_end));
    if (h.events == 0) continue;
    const std::string span = h.first_us && h.last_us
                                 ? fmt::format(" over {:.3f} ms", (*h.last_us - *h.first_us) / 1e3)
                                 : std::string(" (no times: PyTorch before 2.1)");
    std::vector<std::string> actions;
    for (const auto& [action, n] : h.actions) actions.push_back(fmt::format("{} {}", action, n));
    out += fmt::format("  {} events{}: {}\n", h.events, span, fmt::join(actions, ", "));
    const char* unit = h.events_give_requests ? "requested" : "in blocks";
    out += fmt::format(
        "  live ({}): {} at the first event, peak {} (event {}), {} at the dump\n", unit,
        sim::format_bytes(h.live_at_first_event), sim::format_bytes(h.peak_live), h.peak_live_event,
        sim::format_bytes(h.events_give_requests ? h.requested_at_end : h.allocated_at_end));
    out += fmt::format("  reserved: {} at the first event, peak {}, {} at the dump\n",
                       sim::format_bytes(h.reserved_at_first_event),
                       sim::format_bytes(h.peak_reserved), sim::format_bytes(h.reserved_at_end));
    if (h.live_at_first_event < 0 || h.reserved_at_first_event < 0) {
      out += fmt::format(
          "  (negative at the first event: the events do not run up to the dump, as when "
          "recording stopped before it)\n");
    }
    out += replay_text(h, report.replays[i]);
    if (const SnapshotTraceJoin* join = join_of(report, h.device)) out += join_text(report, *join);
  }
  return out;
}

nlohmann::json snapshot_json(const SnapshotReport& report) {
  const MemorySnapshot& snapshot = report.snapshot;
  nlohmann::json j = {{"file", report.file},
                      {"segments", snapshot.segments.size()},
                      {"devices", nlohmann::json::array()},
                      {"allocator_settings",
                       snapshot.settings ? settings_json(*snapshot.settings) : nlohmann::json()}};
  for (std::size_t i = 0; i < report.histories.size(); ++i) {
    nlohmann::json d = history_json(report.histories[i]);
    const AllocatorReplay& r = report.replays[i];
    d["model_reserved_bytes"] = r.reserved_at_end;
    d["model_allocated_bytes"] = r.allocated_at_end;
    d["model"] = replay_json(r);
    if (const SnapshotTraceJoin* join = join_of(report, report.histories[i].device)) {
      d["trace_join"] = join_json(report, *join);
    }
    j["devices"].push_back(std::move(d));
  }
  return j;
}

}  // namespace memplan::importers
