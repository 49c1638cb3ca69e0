#include "importers/snapshot/trace_join.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/json_reader.hpp"

namespace memplan::importers {

namespace {

struct CpuOp {
  double start_us = 0;  // since the epoch
  double end_us = 0;
  std::size_t name = 0;  // index into CpuOps::names
};

struct CpuOps {
  std::vector<CpuOp> ops;
  std::vector<std::string> names;
};

// Microseconds of a count of nanoseconds, whole microseconds first: 1.8e18 ns (a trace's
// baseTimeNanoseconds) is past what a double holds to the nanosecond.
double microseconds(std::int64_t ns) {
  const std::int64_t whole = ns / 1000;
  const std::int64_t rest = ns % 1000;
  return static_cast<double>(whole) + static_cast<double>(rest) / 1000.0;
}

// The trace's CPU ops, their times moved to the epoch.
CpuOps read_cpu_ops(const std::filesystem::path& path) {
  CpuOps out;
  std::unordered_map<std::string, std::size_t> index;
  sim::JsonStreaming streaming;
  streaming.streamed_key = "traceEvents";
  streaming.element = [&](nlohmann::json& e) {
    if (!e.is_object()) return;
    const auto ph = e.find("ph");
    const auto cat = e.find("cat");
    const auto ts = e.find("ts");
    const auto dur = e.find("dur");
    const auto name = e.find("name");
    if (ph == e.end() || *ph != "X" || cat == e.end() || *cat != "cpu_op" || ts == e.end() ||
        !ts->is_number() || dur == e.end() || !dur->is_number() || name == e.end() ||
        !name->is_string()) {
      return;
    }
    const auto [it, added] = index.try_emplace(name->get<std::string>(), out.names.size());
    if (added) out.names.push_back(it->first);
    const double start = ts->get<double>();
    out.ops.push_back({start, start + std::max(0.0, dur->get<double>()), it->second});
  };
  const nlohmann::json top = sim::read_json(path, streaming);
  double base_us = 0;
  if (top.is_object()) {
    if (const auto base = top.find("baseTimeNanoseconds"); base != top.end() && base->is_number()) {
      base_us = base->is_number_integer() ? microseconds(base->get<std::int64_t>())
                                          : base->get<double>() / 1000.0;
    }
  }
  for (CpuOp& op : out.ops) {
    op.start_us += base_us;
    op.end_us += base_us;
  }
  if (out.ops.empty()) {
    throw sim::InputError(path.string(), "no CPU ops (events of cat cpu_op) to join with");
  }
  return out;
}

// Each allocation (time, size) attributed to the op open then that started last, or none.
SnapshotTraceJoin join_device(std::int64_t device, const std::vector<SnapshotEvent>& events,
                              const CpuOps& cpu) {
  enum PointKind { kEnd = 0, kStart = 1, kQuery = 2 };  // at one time: ends, starts, queries
  std::vector<std::tuple<double, int, std::size_t>> points;
  double first = cpu.ops.front().start_us;
  double last = cpu.ops.front().end_us;
  for (std::size_t i = 0; i < cpu.ops.size(); ++i) {
    if (cpu.ops[i].end_us <= cpu.ops[i].start_us) continue;  // [t, t) holds no time
    points.emplace_back(cpu.ops[i].start_us, kStart, i);
    points.emplace_back(cpu.ops[i].end_us, kEnd, i);
    first = std::min(first, cpu.ops[i].start_us);
    last = std::max(last, cpu.ops[i].end_us);
  }
  SnapshotTraceJoin join;
  join.device = device;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const SnapshotEvent& e = events[i];
    if (e.action != "alloc" || !e.time_us || *e.time_us < first || *e.time_us > last) continue;
    ++join.in_span;
    points.emplace_back(*e.time_us, kQuery, i);
  }
  std::sort(points.begin(), points.end());
  // Open ops by (start, end, op): the last is the innermost, the one that started last; of ops
  // that started in the same microsecond, the one that ends last (the caller: an op allocates its
  // output before it calls the ops nested in it, and c10's clock is a microsecond coarse).
  std::set<std::tuple<double, double, std::size_t>> open;
  std::map<std::size_t, OpAllocations> by_name;
  for (const auto& [t, kind, i] : points) {
    if (kind == kStart) open.emplace(cpu.ops[i].start_us, cpu.ops[i].end_us, i);
    if (kind == kEnd) open.erase({cpu.ops[i].start_us, cpu.ops[i].end_us, i});
    if (kind != kQuery || open.empty()) continue;
    const std::size_t name = cpu.ops[std::get<2>(*open.rbegin())].name;
    OpAllocations& a = by_name[name];
    ++a.allocations;
    a.bytes += events[i].size;
    ++join.attributed;
    join.attributed_bytes += events[i].size;
  }
  for (auto& [name, a] : by_name) {
    a.op = cpu.names[name];
    join.by_op.push_back(std::move(a));
  }
  std::stable_sort(
      join.by_op.begin(), join.by_op.end(),
      [](const OpAllocations& a, const OpAllocations& b) { return a.bytes > b.bytes; });
  return join;
}

}  // namespace

std::vector<SnapshotTraceJoin> join_with_trace(const MemorySnapshot& snapshot,
                                               const std::filesystem::path& trace) {
  const CpuOps cpu = read_cpu_ops(trace);
  std::vector<SnapshotTraceJoin> joins;
  std::size_t timed = 0;
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const auto& events = snapshot.device_traces[d];
    if (events.empty()) continue;
    timed += static_cast<std::size_t>(std::count_if(
        events.begin(), events.end(),
        [](const SnapshotEvent& e) { return e.action == "alloc" && e.time_us.has_value(); }));
    joins.push_back(join_device(static_cast<std::int64_t>(d), events, cpu));
  }
  if (timed == 0) {
    throw sim::InputError(trace.string(),
                          "the snapshot's allocations carry no time_us (PyTorch before 2.1, or "
                          "segments only): nothing to join by time");
  }
  const bool overlap = std::any_of(joins.begin(), joins.end(),
                                   [](const SnapshotTraceJoin& j) { return j.in_span > 0; });
  if (!overlap) {
    throw sim::InputError(trace.string(),
                          "the trace's ops and the snapshot's allocations do not overlap in time: "
                          "not the same run");
  }
  return joins;
}

}  // namespace memplan::importers
