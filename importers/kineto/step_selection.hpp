#pragma once
// Which events of a profiler trace are the step to import (ImportOptions in kineto_importer.hpp):
// a `ProfilerStep#N` (by default the one that stands for the steady state: Note [Default step]),
// the first event of a user annotation, a time window, or the whole trace. Any other request, or a
// trace with no such step, is an InputError that says what the trace has instead.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

struct ChosenStep {
  StepWindow step;
  bool chosen = false;      // no --step was given: the default step was taken
  std::string reason = {};  // why that one ("the median of 3 complete steps (...)")
};

/// The step `options` asks for. `gpu`: the trace has device work (a CPU-only trace has no kernel
/// to miss, so its first step is complete).
ChosenStep choose_step(const KinetoTrace& trace, const ImportOptions& options, bool gpu);

/// The ProfilerStep#N of `trace` in which every kernel launched is in the trace (a trace cut off
/// while the device still ran has an incomplete last step), in time order.
std::vector<StepWindow> complete_steps(const KinetoTrace& trace, bool gpu);

/// Note [Default step]: the step of `durations` (one per candidate, in step order, named by
/// `numbers`) that stands for the steady state, and why; `what` names the candidates ("complete
/// steps"). Returns the candidate's position.
std::size_t median_step(const std::vector<sim::Nanoseconds>& durations,
                        const std::vector<std::int64_t>& numbers, std::string_view what,
                        std::string& reason);

}  // namespace memplan::importers::detail
