#pragma once
// RecordedStep: what the profiler itself measured for one step — device busy time and the
// allocated-memory curve — the reference an imported workload's in-core replay is compared with.
// Kept apart from the importer so that the comparison does not reuse the importer's attribution.
#include <cstdint>
#include <optional>

#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

struct RecordedStep {
  /// Union of the intervals of kernels and memsets launched inside the step window (by the
  /// launching runtime call's time; a GPU activity with no runtime call counts when it starts
  /// inside the window). Copies are left out, as in the import.
  sim::Nanoseconds device_busy_ns = 0;
  std::size_t device_activities = 0;
  /// The same activities' durations summed, each counted whole: what ran on every stream, side
  /// by side too (the imported ops' durations add up to it, Note [Device time]).
  sim::Nanoseconds device_time_ns = 0;
  /// From the step's start until the later of its end and the end of the last device activity
  /// it launched: the device may still run the step's work after the host has left it (the next
  /// step's data loading then overlaps it).
  sim::Nanoseconds span_ns = 0;
  /// Peak of allocated bytes inside the step, above the level at the step's start, summed from
  /// the [memory] events' signed sizes (device memory, or host memory for a CPU-only trace), an
  /// allocation whose free no event records freed when its address is known to be free.
  sim::Bytes peak_above_start_bytes = 0;
  /// Peak of "Total Allocated" inside the step, when the trace records it (current format). On
  /// the CPU less what frees the profiler did not see still add to it once they are known (their
  /// address allocated again; Note [Frees the profiler does not see] in memory_timeline.hpp).
  std::optional<sim::Bytes> peak_total_allocated_bytes;
  /// Allocations in the step whose free no event records, known by their address.
  std::size_t unrecorded_frees = 0;
};

RecordedStep measure_recorded_step(const KinetoTrace& trace, const StepWindow& step, bool gpu);

}  // namespace memplan::importers
