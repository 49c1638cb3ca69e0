#include "search/studies/sweep_jobs.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/core.h>

#include "io/job_report.hpp"
#include "io/timeline_export.hpp"
#include "search/policies/network_view.hpp"
#include "search/studies/job_comparison.hpp"
#include "search/studies/job_search.hpp"

namespace memplan::search {

namespace {

// The rank whose plan a row shows: the slowest when every rank fits, else the first that does not.
std::size_t shown_rank(const sim::JobTimeline& timeline) {
  if (timeline.feasible) return timeline.slowest;
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    if (!timeline.ranks[r].feasible) return r;
  }
  return 0;
}

// The row's outcome from the job's run under `plans`; `gave_up(r)`: the policy's own verdict on
// rank r when it gave up (empty otherwise).
void fill_job_outcome(SweepRow& row, const sim::JobRun& run, const sim::Job& job,
                      const std::vector<sim::Plan>& plans,
                      const std::vector<std::string>& gave_up = {}) {
  const sim::JobTimeline& jt = run.timeline;
  row.feasible = jt.feasible;
  row.step_ns = run.period_ns;
  if (row.feasible && row.ideal_ns > 0) {
    row.overhead = static_cast<double>(row.step_ns) / static_cast<double>(row.ideal_ns) - 1.0;
  }
  row.peak_bytes = 0;
  row.wait_ns = 0;
  for (std::size_t r = 0; r < jt.ranks.size(); ++r) {
    row.peak_bytes = std::max(row.peak_bytes, jt.ranks[r].peak_bytes);
    row.wait_ns =
        sim::add_ns(row.wait_ns, sim::collective_totals(jt.ranks[r], run.programs[r]).wait_ns);
  }
  row.slowest_rank = jt.feasible ? job.rank_of(jt.slowest) : -1;
  const auto counts = plans[shown_rank(jt)].action_counts();
  row.keep = counts[0];
  row.swap = counts[1];
  row.recompute = counts[2];
  row.encode = counts[3];
  row.why_not.clear();
  for (std::size_t r = 0; r < jt.ranks.size() && !jt.feasible; ++r) {
    const sim::Timeline& tl = jt.ranks[r];
    if (tl.feasible) continue;
    std::string why = sim::why_not_text(tl, run.programs[r], job.ranks[r]);
    if (why.empty()) {
      why = r < gave_up.size() && !gave_up[r].empty() ? "the policy gave up: " + gave_up[r]
                                                      : std::string("did not fit");
    }
    row.why_not +=
        fmt::format("{}rank {}: {}", row.why_not.empty() ? "" : "; ", job.rank_of(r), why);
  }
}

}  // namespace

sim::Nanoseconds ideal_job_step_ns(const SweepJobPoint& point) {
  return sim::ideal_job_run(*point.job, point.machines).period_ns;
}

void run_job_policy_cell(const SweepJobPoint& point, const Policy& policy,
                         const SweepOptions& options, SweepRow& row) {
  const sim::Job& job = *point.job;
  std::vector<NetworkView> views;
  views.reserve(job.ranks.size());
  for (const sim::Workload& w : job.ranks) views.emplace_back(w);
  const JobComparisonRow result =
      run_job_policy(policy, job, point.machines, views, options.encodings, row.ideal_ns);
  row.policy = result.policy;
  row.decide_s = result.decide_s;
  std::vector<sim::Plan> plans;
  std::vector<std::string> gave_up;
  for (const PolicyDecision& d : result.decisions) {
    plans.push_back(d.plan);
    gave_up.push_back(d.gave_up ? d.note : std::string());
  }
  row.note = result.decisions[shown_rank(result.run.timeline)].note;
  fill_job_outcome(row, result.run, job, plans, gave_up);
}

void run_job_search_cell(const SweepJobPoint& point, const SweepOptions& options, SweepRow& row) {
  SearchOptions so = options.search;
  so.threads = 1;
  so.deterministic = true;
  so.encodings = options.encodings;
  so.on_progress = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const JobSearchResult result = search_job(*point.job, point.machines, so);
  const auto stop = std::chrono::steady_clock::now();
  row.policy = "search";
  row.decide_s = std::chrono::duration<double>(stop - start).count();
  std::string own;
  for (std::size_t r = 0; r < result.ranks.size(); ++r) {
    if (result.ranks[r].source == RankPlan::Source::kOwnSearch)
      own += fmt::format("{}{}", own.empty() ? "" : " ", point.job->rank_of(r));
  }
  row.note =
      result.within_gap
          ? fmt::format("{}'s plans, within {:g}% of the job's lower bound: no rank searched",
                        result.policy, result.gap * 100)
          : fmt::format("from {}, {} rounds{} on rank {}{}", result.search.best_policy,
                        result.search.rounds, result.search.converged ? ", converged" : "",
                        point.job->rank_of(result.searched),
                        own.empty() ? "" : "; searched on their own: ranks " + own);
  fill_job_outcome(row, result.run, *point.job, result.plans());
}

}  // namespace memplan::search
