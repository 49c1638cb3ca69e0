#include "importers/kineto/step_units.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

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

void collect_under(const KinetoTrace& trace, const Nesting& nesting, std::size_t parent,
                   std::vector<Unit>& units) {
  for (std::size_t child : nesting.children[parent]) {
    const std::string& name = trace.cpu_events[child].name;
    if (starts_with(name, "enumerate(DataLoader)")) continue;
    if (is_layer_event(name)) {
      units.push_back(make_unit(child));
    } else {
      collect_under(trace, nesting, child, units);
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

// The units of each thread, sorted by start (units of one thread do not overlap).
class UnitsByThread {
 public:
  UnitsByThread(const KinetoTrace& trace, std::vector<Unit>& units) : trace_(trace), units_(units) {
    for (std::size_t u = 0; u < units.size(); ++u)
      of_thread_[trace.cpu_events[units[u].event].thread].push_back(u);
  }

  /// The unit of `thread` whose window holds `at`, or nullptr.
  Unit* at(const std::string& thread, Nanoseconds at) {
    const auto list = of_thread_.find(thread);
    if (list == of_thread_.end()) return nullptr;
    const auto& ids = list->second;
    auto it = std::upper_bound(ids.begin(), ids.end(), at, [&](Nanoseconds t, std::size_t u) {
      return t < event(units_[u]).start_ns;
    });
    if (it == ids.begin() || at >= event(units_[*std::prev(it)]).end_ns()) return nullptr;
    return &units_[*std::prev(it)];
  }

  /// The unit that started last before `at` (the first unit when none did).
  Unit& before(Nanoseconds at) {
    auto it = std::upper_bound(units_.begin(), units_.end(), at,
                               [&](Nanoseconds t, const Unit& u) { return t < event(u).start_ns; });
    return it == units_.begin() ? units_.front() : *std::prev(it);
  }

 private:
  const CpuEvent& event(const Unit& u) const { return trace_.cpu_events[u.event]; }

  const KinetoTrace& trace_;
  std::vector<Unit>& units_;
  std::unordered_map<std::string, std::vector<std::size_t>> of_thread_;
};

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
      continue;  // collected through its parent
    if (is_layer_event(e.name)) {
      units.push_back(make_unit(i));
    } else if (!starts_with(e.name, "enumerate(DataLoader)")) {
      collect_under(trace, nesting, i, units);
    }
  }
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return trace.cpu_events[a.event].start_ns < trace.cpu_events[b.event].start_ns;
  });
  return units;
}

void attribute_device_time(const KinetoTrace& trace, const StepWindow& step, bool gpu,
                           std::vector<Unit>& units) {
  if (!gpu) {
    for (Unit& u : units) u.device_ns = trace.cpu_events[u.event].duration_ns;
    return;
  }
  const Launches launches(trace);
  UnitsByThread by_thread(trace, units);
  // Activities are sorted by start: each adds what it covers beyond the ones before.
  Nanoseconds covered_to = std::numeric_limits<Nanoseconds>::min();
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.kind == GpuKind::kMemcpy) continue;
    const Nanoseconds end = g.start_ns + g.duration_ns;  // both bounded by the parser
    const Nanoseconds added = std::max<Nanoseconds>(0, end - std::max(g.start_ns, covered_to));
    covered_to = std::max(covered_to, end);
    const auto [thread, at] = launches.of(g);
    if (Unit* unit = thread != nullptr ? by_thread.at(*thread, at) : nullptr) {
      unit->device_ns = saturating_add(unit->device_ns, added);
      unit->first_launch = std::min(unit->first_launch.value_or(at), at);
      continue;
    }
    // Launched inside the step but outside every unit (a communication thread, a hook, an
    // annotation without an aten op): its time goes to the unit that started last before the
    // launch, so that the step's device time is kept whole.
    if (units.empty() || at < step.start_ns || at >= step.end_ns) continue;
    Unit& unit = by_thread.before(at);
    unit.device_ns = saturating_add(unit.device_ns, added);
  }
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
