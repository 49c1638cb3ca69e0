#pragma once
// JobSimulation: one step of a job that ran on several GPUs, every rank's Program simulated
// together. Ranks interact only through collectives: a collective starts when every rank of its
// group has arrived (Note [Collective start] in sim/engine.hpp), so a rank that reaches one late
// makes the others wait, and that wait delays what each of them does after it.
//
// How: each rank runs on its own Engine with a ready time for each of its collectives (none at
// first); after a round, every collective's ready time becomes the latest arrival of its group;
// rounds repeat until no ready time moves. A step is a max-plus system — every start is the
// latest of what it waits for, plus durations — so arrivals only grow with ready times, and the
// rounds climb to the least fixed point, which is the joint simulation: each round settles at
// least the earliest collective still moving, so there are at most as many rounds as collectives,
// plus one. Peers of a group that the job does not hold (a single rank, or some ranks of a larger
// job) are assumed alike to those it holds: they arrive with the latest of them.
//
// Matching: collectives are matched across ranks by (process group, sequence number); send and
// recv by their pair of ranks and their order among that pair's calls.
#include <cstddef>
#include <vector>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "sim/engine.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

struct JobTimeline {
  /// Per rank, in the order the Programs were given, each from its own start.
  std::vector<Timeline> ranks;
  /// Per rank: where its step started, from the earliest rank's start.
  std::vector<Nanoseconds> start_ns;
  bool feasible = true;
  /// The step's wall time, from the earliest rank's start to the last rank's end: the slowest
  /// rank's iteration_ns when they start together (0 when a rank ran out of memory).
  Nanoseconds step_ns = 0;
  std::size_t slowest = 0;  // the rank that ends last
  int rounds = 0;           // rounds the ready times took to settle
};

/// Simulates every rank's Program (each validated and lowered from its own workload, with its
/// Program::rank set) on its Machine together. `options`' collective_ready_ns is ignored (the job
/// sets it); its other fields apply to every rank.
JobTimeline simulate_job(const std::vector<const Program*>& programs,
                         const std::vector<Machine>& machines, const EngineOptions& options = {});

/// What rank `rank`'s collectives wait for when the other ranks are held as `timeline` ran them:
/// per collective of its workload (the first Program::workload_collectives entries of
/// programs[rank]; a plan's re-runs are left to start on arrival), the latest arrival of the other
/// ranks of its call that the job holds (0 when it holds none: peers assumed alike arrive with it).
/// Passed as EngineOptions::collective_ready_ns, the rank then runs alone as it would among those
/// peers, as long as its own arrivals do not move theirs: what a search for one rank's plan prices
/// by. `timeline` is simulate_job's of `programs` and feasible.
std::vector<Nanoseconds> peer_ready_ns(const std::vector<const Program*>& programs,
                                       const JobTimeline& timeline, std::size_t rank);

/// A job's plans lowered and simulated: each rank's Program with its Timeline.
struct JobRun {
  std::vector<Program> programs;
  JobTimeline timeline;
  /// The step's period when the loop repeats it (Note [Step period] in sim/engine.hpp): the
  /// slowest rank's, each rank's found with its collectives at the times the job gave them; the
  /// step_ns without a host side, 0 when a rank does not fit.
  Nanoseconds period_ns = 0;
};

/// Lowers plans[r] (validated for job.ranks[r]) and simulates every rank on machines[r] together,
/// each rank's step starting where the job recorded it (Distributed::step_start_ns, from the
/// earliest rank's; together when a rank has none); each rank's Timeline is from its own start.
/// Sets each rank's Timeline::period_ns to the job's.
JobRun simulate_job(const Job& job, const std::vector<Plan>& plans,
                    const std::vector<Machine>& machines, const EngineOptions& options = {});

/// The job in core on devices with unlimited memory (each machine's, with no memory limit),
/// every rank simulated together: the step every plan is measured against, the rank that sets it
/// and each rank's arrival at its collectives.
JobRun ideal_job_run(const Job& job, const std::vector<Machine>& machines);

}  // namespace memplan::sim
