#include "importers/kineto/step_units.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/core.h>

#include "importers/kineto/collective_units.hpp"
#include "importers/kineto/saturating_add.hpp"

namespace memplan::importers::detail {

namespace {

using sim::Bytes;
using sim::Nanoseconds;

Unit make_unit(std::size_t event) {
  Unit u;
  u.event = event;
  return u;
}

// Depth first, in the children's order, without recursion: events nest as deep as the trace has
// them (2 M identical events each inside the one before overflowed the stack).
void collect_under(const KinetoTrace& trace, const Nesting& nesting, std::size_t parent,
                   std::vector<Unit>& units) {
  std::vector<std::pair<std::size_t, std::size_t>> stack{{parent, 0}};  // event, next child
  while (!stack.empty()) {
    const std::size_t event = stack.back().first;
    const std::size_t next = stack.back().second++;
    if (next == nesting.children[event].size()) {
      stack.pop_back();
      continue;
    }
    const std::size_t child = nesting.children[event][next];
    const std::string& name = trace.cpu_events[child].name;
    if (starts_with(name, "enumerate(DataLoader)") || is_comm_event(trace, child)) continue;
    if (is_layer_event(name) || is_fsdp_machinery(name)) {
      units.push_back(make_unit(child));  // FSDP's hooks: glue, their aten ops no layers
    } else {
      stack.emplace_back(child, 0);
    }
  }
}

// Where each device activity was launched: the launching call's thread and start.
class Launches {
 public:
  explicit Launches(const KinetoTrace& trace) : trace_(trace) {
    for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
      if (auto x = trace.cpu_events[i].external_id) by_external_.emplace(*x, i);
    }
    for (std::size_t i = 0; i < trace.runtime_events.size(); ++i) {
      if (auto c = trace.runtime_events[i].correlation) by_correlation_.emplace(*c, i);
    }
  }

  /// The launching thread (nullptr when no launch is recorded) and the launch's time (when none
  /// is recorded, the activity's start).
  [[nodiscard]] std::pair<const std::string*, Nanoseconds> of(const GpuEvent& g) const {
    if (g.correlation) {
      if (auto r = by_correlation_.find(*g.correlation); r != by_correlation_.end()) {
        const RuntimeEvent& call = trace_.runtime_events[r->second];
        return {&call.thread, call.start_ns};
      }
    }
    if (g.external_id) {
      if (auto c = by_external_.find(*g.external_id); c != by_external_.end()) {
        const CpuEvent& op = trace_.cpu_events[c->second];
        return {&op.thread, op.start_ns};
      }
    }
    return {nullptr, g.start_ns};
  }

 private:
  const KinetoTrace& trace_;
  std::unordered_map<std::int64_t, std::size_t> by_external_;
  std::unordered_map<std::int64_t, std::size_t> by_correlation_;
};

// The layer units of each thread (collectives apart), sorted by start: units of one thread do not
// overlap.
class UnitsByThread {
 public:
  UnitsByThread(const KinetoTrace& trace, std::vector<Unit>& units) : trace_(trace), units_(units) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].role == Unit::Role::kCollective) {
        collectives_[event(units[u]).thread].push_back(u);
      } else {
        layer_.push_back(u);
        of_thread_[event(units[u]).thread].push_back(u);
      }
    }
  }

  /// The unit of `thread` whose window holds `at`: a collective's first, else a layer unit's.
  std::optional<std::size_t> at(const std::string& thread, Nanoseconds at) const {
    if (auto c = holding(collectives_, thread, at)) return c;
    return holding(of_thread_, thread, at);
  }

  /// The layer unit that started last before `at` (the first one when none did).
  std::optional<std::size_t> before(Nanoseconds at) const {
    if (layer_.empty()) return std::nullopt;
    auto it = std::upper_bound(layer_.begin(), layer_.end(), at, [&](Nanoseconds t, std::size_t u) {
      return t < event(units_[u]).start_ns;
    });
    return it == layer_.begin() ? layer_.front() : *std::prev(it);
  }

 private:
  using ByThread = std::unordered_map<std::string, std::vector<std::size_t>>;
  const CpuEvent& event(const Unit& u) const { return trace_.cpu_events[u.event]; }

  std::optional<std::size_t> holding(const ByThread& map, const std::string& thread,
                                     Nanoseconds at) const {
    const auto list = map.find(thread);
    if (list == map.end()) return std::nullopt;
    const auto& ids = list->second;
    auto it = std::upper_bound(ids.begin(), ids.end(), at, [&](Nanoseconds t, std::size_t u) {
      return t < event(units_[u]).start_ns;
    });
    if (it == ids.begin() || at >= event(units_[*std::prev(it)]).end_ns()) return std::nullopt;
    return *std::prev(it);
  }

  const KinetoTrace& trace_;
  std::vector<Unit>& units_;
  std::vector<std::size_t> layer_;
  ByThread of_thread_;
  ByThread collectives_;
};

// One device activity of the step and the unit it counts for.
struct Activity {
  std::size_t unit = 0;
  const GpuEvent* event = nullptr;
  Nanoseconds launch = 0;
};

constexpr std::int64_t kHostStream = -1;  // collectives without a kernel (gloo)

// The stream labels: what ran there (Note [Device time]).
std::vector<std::string> label_streams(const std::vector<std::int64_t>& raw,
                                       const std::set<std::int64_t>& comm, const char* library) {
  std::vector<std::string> labels;
  if (raw.size() < 2) return labels;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == kHostStream) {
      labels.emplace_back("gloo (host)");
    } else if (i == 0) {
      labels.push_back(fmt::format("compute (stream {})", raw[i]));
    } else if (comm.count(raw[i]) > 0) {
      labels.push_back(fmt::format("{} (stream {})", library, raw[i]));
    } else {
      labels.push_back(fmt::format("stream {}", raw[i]));
    }
  }
  return labels;
}

StepStreams number_streams(const KinetoTrace& trace, const std::vector<Unit>& units,
                           const std::vector<Activity>& activities, bool host_collectives) {
  std::map<std::int64_t, std::size_t> compute_count;
  std::map<std::int64_t, Nanoseconds> first_use;
  std::set<std::int64_t> comm;
  for (const Activity& a : activities) {
    const std::int64_t s = a.event->stream;
    auto [it, added] = first_use.emplace(s, a.event->start_ns);
    if (!added) it->second = std::min(it->second, a.event->start_ns);
    if (units[a.unit].role == Unit::Role::kCollective) {
      comm.insert(s);
    } else {
      ++compute_count[s];
    }
  }
  std::vector<std::int64_t> raw;
  raw.reserve(first_use.size() + 1);
  for (const auto& [s, at] : first_use) raw.push_back(s);
  std::sort(raw.begin(), raw.end(), [&](std::int64_t a, std::int64_t b) {
    return std::pair(first_use.at(a), a) < std::pair(first_use.at(b), b);
  });
  // The compute stream: most kernels that are no collective's, the earlier of equal counts.
  auto most = raw.begin();
  for (auto it = raw.begin(); it != raw.end(); ++it) {
    if (compute_count[*it] > compute_count[*most]) most = it;
  }
  if (most != raw.end()) std::rotate(raw.begin(), most, std::next(most));
  if (host_collectives) raw.push_back(kHostStream);
  if (raw.empty()) raw.push_back(0);
  StepStreams streams;
  streams.labels = label_streams(raw, comm, trace.hip ? "rccl" : "nccl");
  streams.raw = std::move(raw);
  return streams;
}

std::int32_t index_of(const StepStreams& streams, std::int64_t raw) {
  const auto it = std::find(streams.raw.begin(), streams.raw.end(), raw);
  return static_cast<std::int32_t>(it - streams.raw.begin());
}

// Counts activity `a` for its unit on stream `s`.
void count(Unit& u, const Activity& a, std::int32_t s) {
  const Nanoseconds d = a.event->duration_ns;
  if (u.role == Unit::Role::kCollective) {
    if (u.first_launch_on.empty()) {
      u.stream = s;
      u.kernel_comm = a.event->comm;
    }
    u.device_ns = saturating_add(u.device_ns, d);
  } else if (s == 0) {
    u.device_ns = saturating_add(u.device_ns, d);
  } else {
    u.side_ns[s] = saturating_add(u.side_ns[s], d);
  }
  u.first_launch = std::min(u.first_launch.value_or(a.launch), a.launch);
  auto [it, added] = u.first_launch_on.emplace(s, a.launch);
  if (!added) it->second = std::min(it->second, a.launch);
}

}  // namespace

std::vector<Unit> collect_units(const KinetoTrace& trace, const Nesting& nesting,
                                const StepWindow& step) {
  std::vector<Unit> units;
  for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
    const CpuEvent& e = trace.cpu_events[i];
    if (e.start_ns < step.start_ns || e.start_ns >= step.end_ns) continue;
    if (step.event) {
      if (i == *step.event) {
        collect_under(trace, nesting, i, units);
        continue;
      }
      if (e.thread == step.thread) continue;  // inside the step event, or beside it
    }
    if (nesting.parent[i] != kNoEvent &&
        trace.cpu_events[nesting.parent[i]].start_ns >= step.start_ns)
      continue;                             // collected through its parent
    if (is_comm_event(trace, i)) continue;  // a collective, collected below
    if (is_layer_event(e.name) || is_fsdp_machinery(e.name)) {
      units.push_back(make_unit(i));
    } else if (!starts_with(e.name, "enumerate(DataLoader)")) {
      collect_under(trace, nesting, i, units);
    }
  }
  for (Unit& c : collect_collectives(trace, nesting, step)) units.push_back(std::move(c));
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return trace.cpu_events[a.event].start_ns < trace.cpu_events[b.event].start_ns;
  });
  return units;
}

StepStreams attribute_device_time(const KinetoTrace& trace, const StepWindow& step, bool gpu,
                                  std::vector<Unit>& units) {
  if (!gpu) {
    for (Unit& u : units) u.device_ns = trace.cpu_events[u.event].duration_ns;
    return StepStreams{{0}, {}};
  }
  const Launches launches(trace);
  const UnitsByThread by_thread(trace, units);
  std::vector<Activity> activities;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.kind == GpuKind::kMemcpy) continue;
    const auto [thread, at] = launches.of(g);
    std::optional<std::size_t> unit = thread != nullptr ? by_thread.at(*thread, at) : std::nullopt;
    // Launched inside the step but outside every unit (a hook, an annotation without an aten op):
    // it counts for the unit that started last before the launch.
    if (!unit && at >= step.start_ns && at < step.end_ns) unit = by_thread.before(at);
    if (unit) activities.push_back({*unit, &g, at});
  }
  bool host_collectives = false;
  std::vector<bool> has_kernel(units.size(), false);
  for (const Activity& a : activities) has_kernel[a.unit] = true;
  for (std::size_t u = 0; u < units.size(); ++u)
    host_collectives |= units[u].role == Unit::Role::kCollective && !has_kernel[u];
  StepStreams streams = number_streams(trace, units, activities, host_collectives);
  for (const Activity& a : activities) count(units[a.unit], a, index_of(streams, a.event->stream));
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].role != Unit::Role::kCollective || has_kernel[u]) continue;
    // A collective without a kernel ran on the host (gloo): its CPU op's time.
    const CpuEvent& e = trace.cpu_events[units[u].event];
    units[u].stream = index_of(streams, kHostStream);
    units[u].device_ns =
        starts_with(e.name, "gloo") || e.name == "record_param_comms" ? e.duration_ns : 0;
  }
  return streams;
}

void measure_workspace(const KinetoTrace& trace, bool gpu, std::vector<Unit>& units) {
  const std::int64_t device = gpu ? 1 : 0;
  const auto& memory = trace.memory_events;
  std::unordered_map<std::string, std::vector<std::size_t>> by_thread;
  for (std::size_t i = 0; i < memory.size(); ++i) {
    if (memory[i].device_type == device) by_thread[memory[i].thread].push_back(i);
  }
  for (Unit& u : units) {
    const CpuEvent& e = trace.cpu_events[u.event];
    auto list = by_thread.find(e.thread);
    if (list == by_thread.end()) continue;
    const auto& ids = list->second;
    auto it = std::lower_bound(ids.begin(), ids.end(), e.start_ns,
                               [&](std::size_t m, Nanoseconds t) { return memory[m].time_ns < t; });
    Bytes level = 0;
    Bytes high = 0;
    for (; it != ids.end() && memory[*it].time_ns < e.end_ns(); ++it) {
      level = saturating_add(level, memory[*it].bytes);
      high = std::max(high, level);
    }
    // Memory allocated and freed again inside the op: scratch space (cuDNN workspace).
    u.workspace = std::max<Bytes>(0, high - std::max<Bytes>(0, level));
  }
}

}  // namespace memplan::importers::detail
