#pragma once
// The lower bound on a job's step: no plans that fit every rank of a job of several GPUs run its
// step faster (Note [A job's lower bound] in job_bound.cpp). Built from each rank's own bound
// (lower_bound.hpp): a rank among its peers only waits longer at its collectives than alone, so
// its step in the job is no shorter than its bound, and the job's step is the latest rank's.
// `memplan search` and `memplan compare` state a job's plans' gap to it as they do a step's.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "search/bound/lower_bound.hpp"
#include "sim/job_simulation.hpp"

namespace memplan::search {

struct JobLowerBound {
  /// Of the job's step as sim::simulate_job measures it: `bound_ns` its step alone, from the
  /// first rank's start to the last rank's end (JobTimeline::step_ns); `period_bound_ns` its
  /// step back to back (JobRun::period_ns); `ideal_ns` and
  /// `ideal_period_ns` the job in core (sim::ideal_job_run). A job's step is ranked back to
  /// back, so `period_bound_ns` is set with or without a host side. `fits` is false when some
  /// rank has no plan that fits; what sets the bound (the update's wait, the period's floor) is
  /// the setting rank's.
  LowerBound job;
  /// The ranks whose bounds were solved (indices into the job's ranks), each rank's bound
  /// beside it.
  std::vector<std::size_t> bounded;
  std::vector<LowerBound> ranks;
  /// The rank whose bound sets the job's bound back to back, or nullopt where the job in core
  /// does (or, below it, a rank's bound over the plans that update on the host).
  std::optional<std::size_t> setting_rank;
};

/// At most this many ranks' bounds are solved, those that end last in core (the bound of any
/// subset holds; alike ranks of a data-parallel job give alike bounds).
inline constexpr std::size_t kMaxBoundedRanks = 8;

/// The lower bound for plans of `job` on `machines` (one per rank), each rank's with `options`.
JobLowerBound job_lower_bound(const sim::Job& job, const std::vector<sim::Machine>& machines,
                              const BoundOptions& options = {});

/// A job's run as the bound measures it: its step alone and back to back.
BoundedStep bounded_job_step(const sim::JobRun& run);

/// What `--json` says sets the job's bound (`lower_bound_rank`): the global rank whose own bound
/// sets it back to back, or null where the job in core does.
nlohmann::json setting_rank_json(const JobLowerBound& bound, const sim::Job& job);

/// bound_text of the job's bound and `step`, then one line on what sets it: "lower bound set by
/// rank 3's own (4 of 4 ranks bounded, each alone)", or by the job in core.
std::string job_bound_text(const JobLowerBound& bound, const sim::Job& job,
                           const BoundedStep& step);

}  // namespace memplan::search
