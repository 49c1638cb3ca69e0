#pragma once
// Which events of a profiler trace are the step to import (ImportOptions in kineto_importer.hpp):
// a `ProfilerStep#N` (by default the first complete one: every kernel it launched is in the
// trace, since a trace cut off while the device still ran has an incomplete last step), the first
// event of a user annotation, a time window, or the whole trace. Any other request, or a trace
// with no such step, is an InputError that says what the trace has instead.
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

struct ChosenStep {
  StepWindow step;
  bool chosen = false;  // no --step was given: the first complete ProfilerStep was taken
};

/// The step `options` asks for. `gpu`: the trace has device work (a CPU-only trace has no kernel
/// to miss, so its first step is complete).
ChosenStep choose_step(const KinetoTrace& trace, const ImportOptions& options, bool gpu);

}  // namespace memplan::importers::detail
