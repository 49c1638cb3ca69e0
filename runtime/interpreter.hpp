#pragma once
// The Program interpreter: runs the very Program the simulator predicted on a Device and returns
// the measured Timeline. Instructions are handed to the device in the ProgramWalk's order
// (sim/program_walk.hpp, the engine's too), where every record is enqueued before any wait on its
// event, which CUDA needs (a wait on a not-yet-recorded event is a no-op there). Alloc and free
// happen in the Program's one order, so the measured peak is the arena's, call for call the
// simulator's. Running out of memory ends the run as infeasible with an OomReport, as in the
// simulator.
#include "core/program.hpp"
#include "core/workload.hpp"
#include "runtime/device.hpp"
#include "sim/timeline.hpp"

namespace memplan::runtime {

/// Runs `program` (lowered from `workload`) on `device` to the end and returns what happened:
/// spans with measured times (0 = the start of the first instruction that takes time), iteration
/// time, peaks, the device allocator's events (with the host clock's time of each call since the
/// run's start, and the op each serves; none for a device that keeps none), and an OomReport when
/// an allocation did not fit under the device's cap.
sim::Timeline run_program(Device& device, const sim::Workload& workload,
                          const sim::Program& program);

}  // namespace memplan::runtime
