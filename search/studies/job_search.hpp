#pragma once
// JobSearch: a plan searched for a job of several ranks — what `memplan search` does with a job
// (a one-rank job keeps search_plan). The ranks of a data-parallel job share one plan, so the plan
// is searched on the rank that sets the job's step in core (the slowest, on devices with unlimited
// memory), pricing each candidate with the other ranks held at their in-core arrivals: its
// collectives start no earlier than its peers' latest arrival (Note [A rank among fixed peers] in
// search/oracle/evaluator.hpp). So a swap that fits into a collective's wait costs nothing and one
// that delays the rank's arrival costs what it delays. The winner then goes to every other rank it
// applies to (validate_plan: the same feature maps, and it fits that rank's memory); a rank whose
// workload differs, or whose memory it does not fit, gets a search of its own, priced the same
// way. The whole job is then simulated together under the plans (sim::simulate_job): that, not the
// search's pricing, is the job's step reported. Last, every policy is run on every rank as
// `memplan compare` runs it (each rank its own decision, the ranks together): when one's plans
// make the job's step shorter than the search's, they are the answer (Note [A job's search is
// never behind a policy] in job_search.cpp), so that search never loses to a row of compare. Those
// rows come first, beside the job's lower bound (search/bound/job_bound.hpp): when the best is
// within SearchOptions::gap of it already, no plan is more than that faster, and no rank is
// searched (a job that fits in core answers at once).
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "search/bound/job_bound.hpp"
#include "search/engine/plan_search.hpp"
#include "sim/job_simulation.hpp"

namespace memplan::search {

/// Where one rank's plan came from.
struct RankPlan {
  enum class Source : std::uint8_t {
    kSearched,   // the rank the plan was searched on
    kShared,     // the searched rank's plan, which applies to this rank too
    kOwnSearch,  // a search of its own: the shared plan does not apply (`why`)
  };
  Source source = Source::kShared;
  std::string why;  // kOwnSearch: validate_plan's refusal, or that it does not fit the memory
  sim::Plan plan;
};

struct JobSearchResult {
  std::size_t searched = 0;       // the rank searched on (an index into the job's ranks)
  sim::Nanoseconds ideal_ns = 0;  // the job in core with unlimited memory: its step
  /// The search on that rank, priced among its peers held fixed; its simulation too (with the
  /// collectives at their ready times).
  SearchResult search;
  std::vector<RankPlan> ranks;  // the search's plan per rank, in the job's order
  sim::JobRun searched_run;     // every rank under the search's plan, simulated together
  /// The policy whose plans (each rank its own decision) are the answer, when they make the
  /// job's step shorter than the search's plans; empty when the search's plans are.
  std::string policy;
  std::vector<sim::Plan> policy_plans;  // that policy's plan per rank, in the job's order
  sim::JobRun run;                      // every rank under the answer's plan (plans()) together
  /// No plans that fit every rank run the job faster (search/bound/job_bound.hpp), over the
  /// search's space (its encodings and host placement): the answer's gap is its step back to
  /// back against it.
  JobLowerBound lower_bound;
  /// The best policy's plans were within SearchOptions::gap of the bound before any search: they
  /// are the answer, and no rank was searched (`search` and `searched_run` are empty).
  bool within_gap = false;
  double gap = 0.0;           // the SearchOptions::gap it was given
  std::size_t evaluated = 0;  // plans the searches simulated, over every rank's search
  double elapsed_s = 0.0;

  /// The answer's plans in the job's order, as sim::simulate_job takes them.
  [[nodiscard]] std::vector<sim::Plan> plans() const;
};

/// Searches a plan for `job` (one machine per rank) as above; `options` for each search (its time
/// limit for each: a rank searched on its own adds one; collective_ready_ns is set per rank).
JobSearchResult search_job(const sim::Job& job, const std::vector<sim::Machine>& machines,
                           const SearchOptions& options);

/// What `memplan search --json` prints for a job: sim::job_summary_json of the run with "policy"
/// ("search"), "plans_from" ("search", or the policy whose plans won), "searched_plans_step_s"
/// (the job's step under the search's own plans), "searched_rank", "ideal_s", per rank "plan"
/// (where the search's plan came from: "searched", "shared", "own search"; or "policy") and "why"
/// for an own search, and of the searched rank's search "best_policy",
/// "best_policy_feasible", "best_policy_iteration_s", "searched_iteration_s" (both priced among
/// fixed peers), "evaluated", "rounds", "converged", "search_s", and the job's bound and the
/// answer's gap to it ("lower_bound_s", "period_lower_bound_s", "gap": add_bound_json;
/// "lower_bound_rank": setting_rank_json).
nlohmann::json job_search_json(const JobSearchResult& result, const sim::Job& job,
                               const std::vector<sim::Machine>& machines);
/// The text report: which rank was searched and how, the best policy against the plan found on
/// it, where each rank's plan came from, then the job's report (sim::job_summary_text) and the
/// job's lower bound with the answer's gap to it (job_bound_text).
std::string job_search_text(const JobSearchResult& result, const sim::Job& job,
                            const std::vector<sim::Machine>& machines);

}  // namespace memplan::search
