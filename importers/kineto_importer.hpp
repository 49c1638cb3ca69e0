#pragma once
// import_kineto: turns one profiler step of a KinetoTrace into a layer-level memplan Workload —
// forward ops with their parameters and activations, the backward ops that differentiate them,
// gradients, optimizer state and the optimizer step — with each op's device time taken from the
// kernels it launched. The profiler does not record which tensor an op read, so the dataflow is
// reconstructed from program order and shapes (Note [Kineto dataflow] in kineto_importer.cpp,
// docs/kineto-import.md says where it can be wrong). The result is validated like any trace.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "importers/kineto_trace.hpp"
#include "sim/workload.hpp"

namespace memplan::importers {

struct ImportOptions {
  /// The N of "ProfilerStep#N"; nullopt picks the first complete step.
  std::optional<std::int64_t> step;
};

/// One `ProfilerStep#N` window on the thread that called `prof.step()`.
struct StepWindow {
  std::int64_t number = 0;
  std::string thread;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds end_ns = 0;
};

/// The profiler steps of a trace, in time order.
std::vector<StepWindow> list_steps(const KinetoTrace& trace);

/// What the importer did, for the CLI and the docs.
struct ImportReport {
  StepWindow step;
  bool step_was_chosen = false;  // true when no --step was given
  bool gpu = true;               // false: a CPU-only trace, op durations are CPU times
  std::size_t forward_ops = 0;
  std::size_t backward_ops = 0;
  std::size_t update_ops = 0;
  std::size_t folded_events = 0;  // top-level events folded into a neighbouring op
  /// Backward nodes whose sequence number no forward layer op recorded (views, transposes, ops
  /// before the step): folded into the previous op.
  std::size_t unmatched_backward = 0;
  bool persistent_grads = false;  // zero_grad zeroes .grad instead of freeing it
  int optimizer_states_per_parameter = 0;
  sim::Nanoseconds op_time_ns = 0;  // sum of op durations
};

struct ImportResult {
  sim::Workload workload;
  ImportReport report;
};

/// Imports one step. `file_label` is the file name written into the provenance. Throws InputError
/// when the trace has no usable step or the step has no forward op.
ImportResult import_kineto(const KinetoTrace& trace, const ImportOptions& options,
                           const std::string& file_label);

}  // namespace memplan::importers
