#pragma once
// JobComparison: every policy on a job of several ranks, the ranks simulated together — what
// `memplan compare` prints for a job (a one-rank job keeps Comparison, comparison.hpp). A policy
// is applied to each rank: each rank's plan is the policy's decision on that rank's own workload
// and machine (the ranks of a data-parallel job share the policy; alike workloads give the same
// plan), and the ranks run together (sim::simulate_job), so a rank that a plan makes late at a
// collective makes its peers wait. A row says whether every rank fits, the job's step (the
// slowest rank's) and which rank sets it, and how long the ranks waited at collectives for a
// later peer.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "search/bound/job_bound.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/comparison.hpp"
#include "sim/job_simulation.hpp"

namespace memplan::search {

struct JobComparisonRow {
  std::string policy;                     // the plan's name (e.g. "pooch", "vdnn-all+gist")
  std::vector<PolicyDecision> decisions;  // per rank, in the job's order
  sim::JobRun run;                        // the ranks' plans lowered and simulated together
  double overhead = 0.0;                  // step / ideal step - 1 (when every rank fits)
  double decide_s = 0.0;                  // wall-clock time the policy took, over every rank

  [[nodiscard]] bool feasible() const { return run.timeline.feasible; }
  /// The job's step the comparison ranks by: the period of the ranks' steps repeated back to back
  /// (JobRun::period_ns), what a training loop sees. The step alone, from the first rank's start
  /// to the last rank's end (JobTimeline::step_ns), is reported beside it as such.
  [[nodiscard]] sim::Nanoseconds step_ns() const { return run.period_ns; }
  /// Time the ranks waited at collectives for a later peer, summed over every rank and call.
  [[nodiscard]] sim::Nanoseconds wait_ns() const;
  /// The rank whose plan the row's action counts show: the slowest when every rank fits, else
  /// the first that does not (an index into the job's ranks).
  [[nodiscard]] std::size_t shown_rank() const;
};

struct JobComparison {
  sim::Nanoseconds ideal_ns = 0;  // in-core on devices with unlimited memory: the job's step
  std::size_t ideal_slowest = 0;  // the rank that sets that step (an index into the job's ranks)
  /// No plans that fit every rank run the job faster (search/bound/job_bound.hpp): each row's
  /// gap is its step back to back against it; nullopt if cancelled before it was solved.
  std::optional<JobLowerBound> lower_bound;
  std::vector<JobComparisonRow> rows;  // in policies() order; only the finished ones if cancelled
  bool cancelled = false;

  /// Indices into rows, best first: jobs where every rank fits by their step (ties in
  /// policies() order), then the others.
  [[nodiscard]] std::vector<std::size_t> ranking() const;
};

/// One policy on every rank of `job` (rank r on machines[r], decided on views[r]), the encodings
/// applied to each plan, the ranks simulated together; the overhead is taken against `ideal_ns`.
/// With a `stop`, throws Stopped when it is due before every rank has decided.
JobComparisonRow run_job_policy(const Policy& policy, const sim::Job& job,
                                const std::vector<sim::Machine>& machines,
                                const std::vector<NetworkView>& views,
                                const EncodingOptions& encodings, sim::Nanoseconds ideal_ns,
                                const Stop* stop = nullptr);

/// Runs every policy of policies() on the job, in parallel; rows in policies() order whatever
/// the number of threads. `machines` holds one machine per rank.
JobComparison compare_job_policies(const sim::Job& job, const std::vector<sim::Machine>& machines,
                                   const ComparisonOptions& options = {});

/// `{"ideal_s", "ideal_slowest_rank", "world_size", "lower_bound_s", "period_lower_bound_s",
/// "lower_bound_rank", "rows": [...]}` (the bound's fields as add_bound_fields and
/// setting_rank_json write them); each row is
/// sim::job_summary_json of its run (feasible, step_s, period_s, slowest_rank, "ranks": each
/// rank's `memplan simulate --json` fields with "rank", "collectives", and the policy's "note"
/// and "gave_up" there) plus `policy`, `rank` (1 is best, by the step's wall), `wall_s`,
/// `overhead`, `gap` (its step back to back against the bound; null when it does not fit),
/// `wait_s` (over every rank), `decide_s`, `gave_up` (on any rank).
nlohmann::json job_comparison_json(const JobComparison& comparison, const sim::Job& job,
                                   const std::vector<sim::Machine>& machines);
/// One line per policy, in columns, best first (ranking()); why a job does not fit, rank by rank.
std::string job_comparison_text(const JobComparison& comparison, const sim::Job& job,
                                const std::vector<sim::Machine>& machines);
/// Header and one line per policy and rank: policy, rank, feasible, the job's step and slowest
/// rank, the rank's iteration, period, wait, peak and actions, and `why_not` last.
std::string job_comparison_csv(const JobComparison& comparison, const sim::Job& job);
/// Why a row's job does not fit, one line per rank that does not (empty when it fits):
/// "rank R: " and the out-of-memory report, or the policy's own verdict when it gave up.
std::string job_why_not(const JobComparisonRow& row, const sim::Job& job);

}  // namespace memplan::search
