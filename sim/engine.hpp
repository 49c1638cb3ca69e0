#pragma once
// Engine: discrete-event simulation of a Program on a Machine (docs/simulator.md "Engine rules").
// Each stream runs its list in order; a wait blocks its stream until the event is recorded; the
// two copy streams are the two copy engines (copies in one direction run one after another, the
// directions overlap each other and compute). Every alloc and free goes through the DeviceMemory
// of the machine's capacity and allocator model; an allocation that finds no block ends the run as
// infeasible with an OomReport, never a crash. Time is integer nanoseconds.
//
// The order of instructions is the ProgramWalk's (sim/program_walk.hpp), the one the runtime
// interpreter uses too; the engine supplies simulated time. An Engine keeps its buffers (arena
// pool, event times, the Timeline) between runs so that a search can simulate thousands of plans
// per thread without touching the heap; use one Engine per thread.
//
// Note [Host stream]
// ~~~~~~~~~~~~~~~~~~
// The CPU thread that dispatches the step is a stream of its own when the workload records a host
// side (Program::host active). Walking the compute stream in issue order, the host spends each
// op's dispatch_ns and then launches it: the op's device work starts no earlier than that launch.
// Each instruction the plan adds costs launch_ns on the host where it is issued: a recompute or a
// codec where it stands on compute, a copy at the compute-stream record its copy stream waits for
// (the copy starts no earlier than that launch). After a synchronizing op the host waits until
// every device instruction issued so far has ended: the compute stream pauses, the copy streams
// run as far as what has been issued lets them, and the host's clock moves to the latest end. A
// plan's update on the host (kHostRun, Note [Host placement] in core/plan.hpp) runs in this
// thread too, as PyTorch runs an optimizer's step over CPU tensors in the thread that called it
// (ZeRO-Offload's and FSDP's CPU offload, memplan.torch's own): the host leaves the step once the
// last run has ended, so the next step back to back starts after it. (The runs follow the
// update ops' dispatch, which together take microseconds: the runs are priced as one stretch
// after it.) The step's wall time is max(device end, host end + tail). Without a host side the
// host clock is never read and the engine is the device-only one.
//
// Note [Step period]
// ~~~~~~~~~~~~~~~~~~
// A training loop runs the step back to back, and what a profiler records as the step's wall
// (ProfilerStep#N, from one prof.step() to the next) is the period between consecutive host starts:
// step k+1's host starts when step k's host leaves (host end + tail) while step k's device work may
// still be draining, so the next step's kernels queue behind it. One step replayed alone ends with
// its device work instead, which overstates the period of a CPU-bound step whose last kernels run
// beside the next step's data loading, and understates nothing. step_period_ns replays the step
// with each device stream first busy with the backlog the previous step left
// (EngineOptions::stream_ready_ns: its end less the host's end, from the host's start) and repeats
// from no backlog until the backlog repeats; the period is then the host's end. When the device is
// the bottleneck the backlog grows every step, by the same once the host's launches no longer
// reach the device queue's head, and the period is that growth per step.
//
// Note [Runs without device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Memory never changes timing: an allocation is instantaneous or ends the run, and every alloc and
// free is a compute-stream instruction, so the allocator sees the same calls in the same order
// whatever the times. A run that needs only a plan's times can therefore leave the allocator out
// (EngineOptions::device_memory false): its times are those of the run with memory on a device
// without a limit, and so of every run with memory that does not run out. The search weighs most
// candidates so (one slower than the plan it must beat is not better, whether it fits or not:
// Evaluator::cost with a bar), and the steps step_period_ns replays after a step that fits
// allocate as that step did.
#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "core/machine.hpp"
#include "core/program.hpp"
#include "memory/device_memory.hpp"
#include "sim/program_walk.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

// Note [Collective start]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A collective (kCollective, on its side stream) is reached when its stream gets to it and what it
// waits for has happened: that is its arrival. It starts when every rank of its group has arrived
// (EngineOptions::collective_ready_ns: the group's last arrival, which the job's simulation finds,
// sim/job_simulation.hpp), and then takes its transfer time, which the Machine prices
// (Machine::collective_ns: the recorded transfer time, or the interconnect's cost model). One rank
// run alone, whose peers are assumed alike, starts each collective on arrival.
// Timeline::collectives keeps arrival, start and end, so waiting for a late peer is told apart from
// the transfer.

struct EngineOptions {
  bool record_spans = true;   // Timeline::spans
  bool record_memory = true;  // Timeline::memory
  bool record_stalls = true;  // Timeline::stalls (the per-cause totals are always kept)
  /// false: allocations and frees are not placed (Note [Runs without device memory]): the run's
  /// times are those it takes on a device without a memory limit, and its peaks are zero.
  bool device_memory = true;
  /// Per Program stream: busy with the previous step's work until then (Note [Step period]);
  /// empty: every stream is idle at the start.
  std::vector<Nanoseconds> stream_ready_ns;
  /// Per Program::collectives entry: the earliest it may start (Note [Collective start]); empty:
  /// each starts on arrival. Given for the workload's collectives at least; a plan's re-runs past
  /// its end (Program::workload_collectives) start on arrival, their peers alike.
  std::vector<Nanoseconds> collective_ready_ns;

  /// Totals only: no spans, memory curve or stall list (a search's runs).
  static EngineOptions totals() {
    EngineOptions o;
    o.record_spans = o.record_memory = o.record_stalls = false;
    return o;
  }
  /// totals() without device memory: a plan's times alone.
  static EngineOptions times() {
    EngineOptions o = totals();
    o.device_memory = false;
    return o;
  }
};

class Engine {
 public:
  /// Simulates `program`; the result stays valid until the next run on this Engine.
  const Timeline& run(const Program& program, const Machine& machine,
                      const EngineOptions& options = {});
  /// The last run's timeline (what run() returned), until the next run.
  [[nodiscard]] const Timeline& last_run() const { return timeline_; }

 private:
  // The walk's driver: one run's simulated time (engine.cpp), with or without a host stream.
  template <bool kHostStream>
  class Clock;
  template <bool kHostStream>
  WalkEnd walk(const Program& program, const Machine& machine, const EngineOptions& options);

  void host_temporary_runs(const Program& program);
  void host_peak(const Machine& machine);

  ProgramWalk walk_;
  DeviceMemory memory_;
  std::vector<Nanoseconds> event_time_;                     // per event, read only once recorded
  std::vector<std::optional<DeviceMemory::Handle>> block_;  // per buffer, while allocated
  /// Per buffer, where its block is (segment, offset, bytes), with record_memory.
  std::vector<std::tuple<std::int32_t, Bytes, Bytes>> placed_;
  std::vector<std::pair<Nanoseconds, Bytes>> host_changes_;
  // Per host slot when some are temporaries: the first and last host runs that name it, as
  // indices into the host stream (-1: none, or done with in this run).
  std::vector<std::int64_t> host_first_run_;
  std::vector<std::int64_t> host_last_run_;
  Timeline timeline_;
};

/// The device memory a backend needs to run `program` (host memory and allocator model as in
/// `machine`): the reserved peak of a run with unlimited device memory. Neither model places
/// differently at that capacity (Note [Arena top block]; the caching model gives no segment back
/// there), so the program runs there as it ran unlimited.
Bytes capacity_to_run(const Program& program, const Machine& machine);

/// The period of `program`'s step when a training loop repeats it back to back (Note [Step
/// period]), given `alone`, the step run once on `machine` from an idle device: its iteration_ns
/// without a host side, 0 when the step does not fit. `engine` replays the steps after the first
/// (its timeline is overwritten: `alone` may be it).
/// `collective_ready_ns`: when each collective of the program may start (a job's, Note [Collective
/// start]); empty: each on arrival.
/// kMaxNanoseconds when the steps replayed run past the clock's end.
Nanoseconds step_period_ns(Engine& engine, const Program& program, const Machine& machine,
                           const Timeline& alone,
                           const std::vector<Nanoseconds>& collective_ready_ns = {});

/// Sets `timeline.period_ns` to step_period_ns of the run it holds; a period at the clock's end
/// makes the timeline saturated (Timeline::saturated) and infeasible, as a step alone that ran
/// there is already.
void set_step_period(Timeline& timeline, const Program& program, const Machine& machine,
                     const std::vector<Nanoseconds>& collective_ready_ns = {});

}  // namespace memplan::sim
