#pragma once
// The cells of a grid of jobs (search/studies/sweep.hpp, SweepGrid::jobs): a policy or the search
// on every rank of a job at one point of the grid, the ranks simulated together as `memplan
// compare` and `memplan search` run a job (job_comparison.hpp, job_search.hpp), summed up in one
// SweepRow. sweep.cpp builds the grid and runs the cells; this file is what a job's cell computes.
#include <vector>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/sweep.hpp"

namespace memplan::search {

/// One point of a grid of jobs: the job (its world size applied) and one machine per rank.
struct SweepJobPoint {
  const sim::Job* job = nullptr;
  std::vector<sim::Machine> machines;
};

/// The job's step in core on devices with unlimited memory, the ranks together: what a job's
/// row's overhead is taken against (its slowest rank's iteration, as a step's row takes its
/// iteration).
sim::Nanoseconds ideal_job_step_ns(const SweepJobPoint& point);

/// `policy` on every rank (run_job_policy), into `row`'s outcome fields; `row` holds its grid
/// point's fields and ideal_ns.
void run_job_policy_cell(const SweepJobPoint& point, const Policy& policy,
                         const SweepOptions& options, SweepRow& row);
/// The job's search (search_job, one thread, deterministic as every search cell), into `row`'s
/// outcome fields; the note names the policy it started from, its rounds and the ranks searched
/// on their own.
void run_job_search_cell(const SweepJobPoint& point, const SweepOptions& options, SweepRow& row);

}  // namespace memplan::search
