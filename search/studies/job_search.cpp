#include "search/studies/job_search.hpp"

#include <chrono>
#include <optional>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "io/job_report.hpp"
#include "io/timeline_export.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/studies/job_comparison.hpp"

namespace memplan::search {

namespace {

// The search for rank r's plan among its peers held at the in-core job's arrivals (alone in the
// one case that has none: an in-core job that does not fit even unlimited device memory).
SearchResult search_rank(const sim::Job& job, const std::vector<sim::Machine>& machines,
                         const sim::JobRun& ideal, std::size_t r, const SearchOptions& options) {
  std::vector<const sim::Program*> programs;
  for (const sim::Program& p : ideal.programs) programs.push_back(&p);
  SearchOptions so = options;
  so.collective_ready_ns.clear();
  if (ideal.timeline.feasible)
    so.collective_ready_ns = sim::peer_ready_ns(programs, ideal.timeline, r);
  return search_plan(job.ranks[r], machines[r], so);
}

// Why `plan` (searched on another rank) does not apply to rank r: validate_plan's refusal, or
// that it does not fit the rank's device memory; nullopt when it applies.
std::optional<std::string> why_not_shared(const sim::Plan& plan, const sim::Workload& workload,
                                          const sim::Machine& machine) {
  try {
    sim::validate_plan(plan, workload, "the shared plan");
  } catch (const sim::InputError& e) {
    return std::string("its workload differs: ") + e.what();
  }
  Evaluator evaluator(workload, machine);
  const Evaluation fits = evaluator.fits(plan);
  if (!fits.feasible) {
    return fmt::format("the shared plan does not fit its memory ({} missing)",
                       sim::format_bytes(fits.oom_bytes_missing));
  }
  return std::nullopt;
}

const char* source_name(RankPlan::Source source) {
  switch (source) {
    case RankPlan::Source::kSearched:
      return "searched";
    case RankPlan::Source::kShared:
      return "shared";
    case RankPlan::Source::kOwnSearch:
      return "own search";
  }
  return "";
}

// Note [A job's search is never behind a policy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The search prices plans on one rank among peers held fixed, and shares the winner. That is
// blind to what a shared plan costs a rank that has no wait to hide it in: on late_gather_job the
// swap that rank 1 hides in its wait at the gather slows rank 0, which sets the job's period
// back to back (9600 ns), while each rank deciding for itself (a policy in `memplan compare`)
// gives the ideal 9300 ns. So the job's search weighs compare's rows, each rank its own decision
// and the ranks together, and takes the best row's plans when they make the job's step (the
// period, what a training loop sees) shorter. Rows in policies() order break ties, and the
// search's plans win a tie. The rows come first: when the best is within the gap of the job's
// lower bound (no plans are more than that faster), it is the answer without a search.
JobComparison compare_first(const sim::Job& job, const std::vector<sim::Machine>& machines,
                            const SearchOptions& options) {
  ComparisonOptions co;
  co.encodings = options.encodings;
  co.threads = options.threads;
  co.cancel = options.cancel;
  co.lower_bound = false;  // the search solves its own, over its space
  // Each row is a policy seeding the search: the progress sees it so (a callback may stop it).
  if (options.on_progress) {
    co.on_progress = [&options](const ComparisonProgress& p) {
      SearchProgress seeded;
      seeded.stage = "seeding";
      seeded.policy = p.policy;
      seeded.evaluated = p.done;
      seeded.elapsed_s = p.elapsed_s;
      options.on_progress(seeded);
    };
  }
  return compare_job_policies(job, machines, co);
}

// The best row of `rows` that fits; nullptr when none does.
const JobComparisonRow* best_row(const JobComparison& rows) {
  const std::vector<std::size_t> ranking = rows.ranking();
  if (ranking.empty() || !rows.rows[ranking.front()].feasible()) return nullptr;
  return &rows.rows[ranking.front()];
}

void adopt(const JobComparisonRow& row, JobSearchResult& result) {
  result.policy = row.policy;
  for (const PolicyDecision& d : row.decisions) result.policy_plans.push_back(d.plan);
  result.run = row.run;
}

}  // namespace

std::vector<sim::Plan> JobSearchResult::plans() const {
  if (!policy.empty()) return policy_plans;
  std::vector<sim::Plan> out;
  out.reserve(ranks.size());
  for (const RankPlan& r : ranks) out.push_back(r.plan);
  return out;
}

JobSearchResult search_job(const sim::Job& job, const std::vector<sim::Machine>& machines,
                           const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  JobSearchResult result;
  const sim::JobRun ideal = sim::ideal_job_run(job, machines);
  result.ideal_ns = ideal.period_ns;
  result.searched = ideal.timeline.slowest;
  result.gap = options.gap;
  BoundOptions bound;  // the search's space
  bound.encodings = options.encodings;
  bound.host_placement = options.host_placement;
  result.lower_bound = job_lower_bound(job, machines, bound);
  const JobComparison rows = compare_first(job, machines, options);
  for (const JobComparisonRow& row : rows.rows) result.evaluated += row.decisions.size();
  const JobComparisonRow* best = best_row(rows);
  const auto stamp = [&] {
    result.elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (best != nullptr) {
    const std::optional<double> gap =
        bound_gap(result.lower_bound.job, bounded_job_step(best->run));
    if (gap && *gap <= options.gap) {
      result.within_gap = true;
      adopt(*best, result);
      stamp();
      return result;
    }
  }
  result.search = search_rank(job, machines, ideal, result.searched, options);
  result.evaluated += result.search.evaluated;
  result.ranks.resize(job.ranks.size());
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    RankPlan& rank = result.ranks[r];
    rank.plan = result.search.plan;
    if (r == result.searched) {
      rank.source = RankPlan::Source::kSearched;
      continue;
    }
    const std::optional<std::string> why =
        why_not_shared(result.search.plan, job.ranks[r], machines[r]);
    if (!why) continue;
    rank.source = RankPlan::Source::kOwnSearch;
    rank.why = *why;
    const SearchResult own = search_rank(job, machines, ideal, r, options);
    rank.plan = own.plan;
    result.evaluated += own.evaluated;
  }
  result.searched_run = sim::simulate_job(job, result.plans(), machines);
  result.run = result.searched_run;
  if (best != nullptr &&
      (!result.searched_run.timeline.feasible || best->step_ns() < result.searched_run.period_ns))
    adopt(*best, result);
  stamp();
  return result;
}

nlohmann::json job_search_json(const JobSearchResult& result, const sim::Job& job,
                               const std::vector<sim::Machine>& machines) {
  nlohmann::json j = sim::job_summary_json(result.run, job, machines);
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    j["ranks"][r]["plan"] = result.policy.empty() ? source_name(result.ranks[r].source) : "policy";
    if (r < result.ranks.size() && !result.ranks[r].why.empty())
      j["ranks"][r]["why"] = result.ranks[r].why;
  }
  const SearchResult& s = result.search;
  const auto seconds = [](const Evaluation& e) {
    return e.feasible ? nlohmann::json(sim::to_seconds(e.step_ns)) : nlohmann::json(nullptr);
  };
  j["policy"] = "search";
  j["plans_from"] = result.policy.empty() ? "search" : result.policy;
  j["searched_plans_step_s"] = !result.within_gap && result.searched_run.timeline.feasible
                                   ? nlohmann::json(sim::to_seconds(result.searched_run.period_ns))
                                   : nlohmann::json(nullptr);
  j["searched_rank"] = job.rank_of(result.searched);
  j["ideal_s"] = sim::to_seconds(result.ideal_ns);
  j["searched_rank_step_s"] = seconds(s.evaluation);
  // Without a search, the best policy is compare's best row, whose plans are the answer.
  j["best_policy"] = result.within_gap ? result.policy : s.best_policy;
  j["best_policy_feasible"] = result.within_gap || s.best_policy_evaluation.feasible;
  j["best_policy_rank_step_s"] = seconds(s.best_policy_evaluation);
  j["evaluated"] = result.evaluated;
  j["rounds"] = s.rounds;
  j["converged"] = s.converged;
  j["within_gap"] = result.within_gap;
  j["search_s"] = result.elapsed_s;
  add_bound_json(j, result.lower_bound.job, bounded_job_step(result.run));
  j["lower_bound_rank"] = setting_rank_json(result.lower_bound, job);
  for (const SkippedPolicy& skipped : s.skipped)
    j["skipped_policies"][skipped.policy] = skipped.reason;
  return j;
}

std::string job_search_text(const JobSearchResult& result, const sim::Job& job,
                            const std::vector<sim::Machine>& machines) {
  const SearchResult& s = result.search;
  const std::int32_t searched = job.rank_of(result.searched);
  if (result.within_gap) {
    std::string out = fmt::format(
        "searched   no rank: {}'s plans, each rank its own decision, are within {:g}% of the "
        "job's lower bound (no plans are more than that faster)\n",
        result.policy, result.gap * 100);
    out += sim::job_summary_text(result.run, job, machines, "search");
    out += job_bound_text(result.lower_bound, job, bounded_job_step(result.run));
    return out + fmt::format("{} plans evaluated in {:.2f} s (within {:g}% of the lower bound)\n",
                             result.evaluated, result.elapsed_s, result.gap * 100);
  }
  std::string out = fmt::format(
      "searched   on rank {}, the last to end in core (the job's step {:.3f} ms with unlimited "
      "memory), its collectives priced with the other ranks at their in-core arrivals\n",
      searched, sim::to_milliseconds(result.ideal_ns));
  if (s.best_policy_evaluation.feasible && s.evaluation.feasible) {
    out +=
        fmt::format("rank {}     best policy ({}) {:.3f} ms -> search {:.3f} ms ({:+.1f}%)\n",
                    searched, s.best_policy, sim::to_milliseconds(s.best_policy_evaluation.step_ns),
                    sim::to_milliseconds(s.evaluation.step_ns),
                    (static_cast<double>(s.evaluation.step_ns) /
                         static_cast<double>(s.best_policy_evaluation.step_ns) -
                     1.0) *
                        100);
  } else {
    out += fmt::format("rank {}     best policy: {} ({})\n", searched, s.best_policy,
                       s.best_policy_evaluation.feasible ? "fits" : "does not fit");
  }
  std::string shared;
  std::size_t sharing = 0;
  for (std::size_t r = 0; r < result.ranks.size(); ++r) {
    const RankPlan& rank = result.ranks[r];
    if (rank.source == RankPlan::Source::kShared) {
      shared += fmt::format("{}{}", sharing++ == 0 ? "" : ", ", job.rank_of(r));
    } else if (rank.source == RankPlan::Source::kOwnSearch) {
      out += fmt::format("plans      rank {} searched on its own: {}\n", job.rank_of(r), rank.why);
    }
  }
  if (sharing > 0) {
    out += fmt::format("plans      rank{} {} share{} rank {}'s plan\n", sharing > 1 ? "s" : "",
                       shared, sharing > 1 ? "" : "s", searched);
  }
  if (!result.policy.empty()) {
    out += fmt::format(
        "answer     {}'s plans, each rank its own decision: the job's step {:.3f} ms back to "
        "back, where the plans above give {}\n",
        result.policy, sim::to_milliseconds(result.run.period_ns),
        result.searched_run.timeline.feasible
            ? fmt::format("{:.3f} ms", sim::to_milliseconds(result.searched_run.period_ns))
            : std::string("a job that does not fit"));
  }
  out += sim::job_summary_text(result.run, job, machines, "search");
  out += job_bound_text(result.lower_bound, job, bounded_job_step(result.run));
  out += fmt::format("{} plans evaluated in {:.2f} s over {} rounds on rank {} ({})\n",
                     result.evaluated, result.elapsed_s, s.rounds, searched, stop_reason(s, 0.0));
  return out;
}

}  // namespace memplan::search
