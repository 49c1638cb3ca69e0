#include "importers/kineto/step_selection.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"
#include "importers/kineto/step_events.hpp"

namespace memplan::importers {

std::vector<StepWindow> list_steps(const KinetoTrace& trace) {
  std::vector<StepWindow> steps;
  for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
    const CpuEvent& e = trace.cpu_events[i];
    if (auto n = detail::step_number(e.name))
      steps.push_back({*n, e.name, e.thread, e.start_ns, e.end_ns(), i});
  }
  return steps;
}

namespace detail {

namespace {

using sim::Nanoseconds;

[[noreturn]] void fail(const KinetoTrace& trace, const std::string& what) {
  throw sim::InputError(trace.source, what);
}

// Every kernel launched inside the step is in the trace (and it launched one).
bool step_complete(const KinetoTrace& trace, const StepWindow& step, bool gpu) {
  if (!gpu) return true;
  std::set<std::int64_t> seen;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.correlation) seen.insert(*g.correlation);
  }
  bool launched = false;
  for (const RuntimeEvent& r : trace.runtime_events) {
    if (r.start_ns < step.start_ns || r.start_ns >= step.end_ns || !r.correlation) continue;
    if (r.name.find("Launch") == std::string::npos) continue;
    launched = true;
    if (seen.count(*r.correlation) == 0) return false;
  }
  return launched;
}

StepWindow annotation_step(const KinetoTrace& trace, const std::string& name) {
  for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
    const CpuEvent& e = trace.cpu_events[i];
    if (e.name == name)
      return {-1, fmt::format("annotation '{}'", name), e.thread, e.start_ns, e.end_ns(), i};
  }
  fail(trace, fmt::format("no event named '{}' (--step-annotation)", name));
}

// --whole and --window take one training step: a range over the starts of several
// ProfilerStep#N would make one step's ops of the first iteration and fold every later
// iteration's device time into them (each op is made once), a step many times too slow.
void require_one_step(const KinetoTrace& trace, const StepWindow& range, std::string_view flag) {
  std::vector<std::int64_t> inside;
  for (const StepWindow& s : list_steps(trace)) {
    if (s.start_ns >= range.start_ns && s.start_ns < range.end_ns) inside.push_back(s.number);
  }
  if (inside.size() <= 1) return;
  fail(trace, fmt::format("{} takes one training step, and {} holds {} (ProfilerStep#{}): "
                          "import one with --step N (without it, the median complete step)",
                          flag, range.label, inside.size(), fmt::join(inside, ", #")));
}

StepWindow window_step(const KinetoTrace& trace, const ImportOptions& options) {
  if (trace.cpu_events.empty()) fail(trace, "no CPU events: nothing to import");
  Nanoseconds first = trace.cpu_events.front().start_ns;
  Nanoseconds last = first;
  for (const CpuEvent& e : trace.cpu_events) last = std::max(last, e.end_ns());
  for (const GpuEvent& g : trace.gpu_events) first = std::min(first, g.start_ns);
  if (options.whole_trace) {
    StepWindow whole{-1, "the whole trace", "", first, last + 1, std::nullopt};
    require_one_step(trace, whole, "--whole");
    return whole;
  }
  const auto [from, to] = *options.window;
  // A window is at most a day long, like any event the parser accepts: no sum overflows.
  constexpr Nanoseconds kDay = Nanoseconds{86400} * 1'000'000'000;
  if (from < 0 || to <= from || to > kDay)
    fail(trace, fmt::format("--window {}:{} ns: expected 0 <= START < END <= one day", from, to));
  StepWindow window{-1,
                    fmt::format("window {:.3f}:{:.3f} ms", static_cast<double>(from) / 1e6,
                                static_cast<double>(to) / 1e6),
                    "",
                    first + from,
                    first + to,
                    std::nullopt};
  require_one_step(trace, window, "--window");
  return window;
}

}  // namespace

ChosenStep choose_step(const KinetoTrace& trace, const ImportOptions& options, bool gpu) {
  const int kinds = (options.step ? 1 : 0) + (options.step_annotation ? 1 : 0) +
                    (options.window ? 1 : 0) + (options.whole_trace ? 1 : 0);
  if (kinds > 1)
    fail(trace, "choose the step one way: --step, --step-annotation, --window or --whole");
  if (options.step_annotation) return {annotation_step(trace, *options.step_annotation)};
  if (options.window || options.whole_trace) return {window_step(trace, options)};
  const std::vector<StepWindow> steps = list_steps(trace);
  if (steps.empty()) {
    fail(trace,
         "no 'ProfilerStep#N' events: call prof.step() once per iteration under "
         "torch.profiler.profile(schedule=...), or name the step with --step-annotation NAME (a "
         "record_function range), --window START:END or --whole");
  }
  std::vector<std::int64_t> numbers;
  numbers.reserve(steps.size());
  for (const auto& s : steps) numbers.push_back(s.number);
  if (options.step) {
    for (const auto& s : steps) {
      if (s.number == *options.step) return {s};
    }
    fail(trace, fmt::format("no ProfilerStep#{} in the trace (it has ProfilerStep#{})",
                            *options.step, fmt::join(numbers, ", #")));
  }
  const std::vector<StepWindow> complete = complete_steps(trace, gpu);
  if (complete.empty()) {
    fail(trace, fmt::format("no complete step: in each of ProfilerStep#{} some kernel launch has "
                            "no kernel in the trace; pass --step N to import one anyway",
                            fmt::join(numbers, ", #")));
  }
  std::vector<Nanoseconds> durations;
  std::vector<std::int64_t> complete_numbers;
  for (const StepWindow& s : complete) {
    durations.push_back(s.end_ns - s.start_ns);
    complete_numbers.push_back(s.number);
  }
  ChosenStep chosen{{}, true, {}};
  chosen.step = complete[median_step(durations, complete_numbers, "complete steps", chosen.reason)];
  return chosen;
}

std::vector<StepWindow> complete_steps(const KinetoTrace& trace, bool gpu) {
  std::vector<StepWindow> complete;
  for (const StepWindow& s : list_steps(trace)) {
    if (step_complete(trace, s, gpu)) complete.push_back(s);
  }
  return complete;
}

// Note [Default step]
// ~~~~~~~~~~~~~~~~~~~
// The profiler's first active step is often a warm-up (allocator growth, cuDNN autotuning,
// lazy initialisation, NCCL communicators set up): on two single-GPU traces it was 43% and 31%
// longer than the others. The default step is the one whose duration is the median of the
// candidates (the complete steps; for a job, the step numbers complete on every rank, each as
// long as its slowest rank's), the lower median of an even count, the earlier of equal ones. With
// one candidate it is that one ("the first complete step", as before). --step N still picks any.
std::size_t median_step(const std::vector<Nanoseconds>& durations,
                        const std::vector<std::int64_t>& numbers, std::string_view what,
                        std::string& reason) {
  if (durations.size() == 1) {
    reason = "the first complete step";
    return 0;
  }
  std::vector<std::size_t> order(durations.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return durations[a] < durations[b]; });
  const Nanoseconds median = durations[order[(order.size() - 1) / 2]];
  std::size_t chosen = 0;
  while (durations[chosen] != median) ++chosen;  // the earliest of that duration
  std::vector<std::string> ms;
  ms.reserve(durations.size());
  for (Nanoseconds d : durations) ms.push_back(fmt::format("{:.1f}", static_cast<double>(d) / 1e6));
  reason = fmt::format("the median of {} {} ({} ms)", durations.size(), what, fmt::join(ms, ", "));
  if (chosen != 0 && durations[0] > median + median / 10) {
    reason += fmt::format(
        "; the first, ProfilerStep#{}, is {:.0f}% longer: a warm-up", numbers[0],
        100.0 * static_cast<double>(durations[0] - median) / static_cast<double>(median));
  }
  return chosen;
}

}  // namespace detail

}  // namespace memplan::importers
