#pragma once
// Engine: discrete-event simulation of a Program on a Machine (docs/simulator.md "Engine rules").
// Each stream runs its list in order; a wait blocks its stream until the event is recorded; the
// two copy streams are the two copy engines (copies in one direction run one after another, the
// directions overlap each other and compute). Every alloc and free goes through a DeviceArena of
// the machine's capacity; an allocation that finds no block ends the run as infeasible with an
// OomReport, never a crash. Time is integer nanoseconds.
//
// Because streams interact only through events, the engine advances each stream as far as it can
// and moves to the next when it blocks: no event queue, O(1) per instruction. An Engine keeps its
// buffers (arena pool, event times, the Timeline) between runs so that a search can simulate
// thousands of plans per thread without touching the heap; use one Engine per thread.
#include <vector>

#include "sim/device_arena.hpp"
#include "sim/machine.hpp"
#include "sim/program.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

struct EngineOptions {
  bool record_spans = true;   // Timeline::spans
  bool record_memory = true;  // Timeline::memory
  bool record_stalls = true;  // Timeline::stalls (the per-cause totals are always kept)
};

class Engine {
 public:
  /// Simulates `program`; the result stays valid until the next run on this Engine.
  const Timeline& run(const Program& program, const Machine& machine,
                      const EngineOptions& options = {});

 private:
  void out_of_memory(const Program& program, const Instruction& in, Nanoseconds now);
  void host_peak(const Machine& machine);

  DeviceArena arena_;
  std::vector<Nanoseconds> event_time_;
  std::vector<DeviceArena::Handle> block_;  // per buffer, -1 while not allocated
  std::vector<std::pair<Nanoseconds, Bytes>> host_changes_;
  Timeline timeline_;
};

/// The device memory a backend needs to run `program` (host memory as in `machine`): the smallest
/// capacity, from the reserved peak of a run with unlimited device memory upward, at which the
/// program fits. Best fit weighs the arena's free tail like any other block, so a device exactly
/// as large as the unlimited run's reserved peak can place buffers differently and run out; from
/// twice that peak on the tail is larger than every hole and the placement is the unlimited one,
/// so the search ends there at the latest.
Bytes capacity_to_run(const Program& program, const Machine& machine);

}  // namespace memplan::sim
