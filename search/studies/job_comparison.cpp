#include "search/studies/job_comparison.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include <oneapi/tbb/task_arena.h>

#include <fmt/core.h>

#include "io/job_report.hpp"
#include "io/timeline_export.hpp"
#include "search/parallel.hpp"

namespace memplan::search {

namespace {

std::vector<sim::Plan> plans_of(const std::vector<PolicyDecision>& decisions) {
  std::vector<sim::Plan> plans;
  plans.reserve(decisions.size());
  for (const PolicyDecision& d : decisions) plans.push_back(d.plan);
  return plans;
}

std::vector<NetworkView> views_of(const sim::Job& job) {
  std::vector<NetworkView> views;
  views.reserve(job.ranks.size());
  for (const sim::Workload& w : job.ranks) views.emplace_back(w);
  return views;
}

// The largest live peak over the ranks (up to where memory ran out on a rank that does not fit).
sim::Bytes peak_bytes(const sim::JobRun& run) {
  sim::Bytes peak = 0;
  for (const sim::Timeline& tl : run.timeline.ranks) peak = std::max(peak, tl.peak_bytes);
  return peak;
}

}  // namespace

sim::Nanoseconds JobComparisonRow::wait_ns() const {
  sim::Nanoseconds wait = 0;
  for (std::size_t r = 0; r < run.timeline.ranks.size(); ++r)
    wait =
        sim::add_ns(wait, sim::collective_totals(run.timeline.ranks[r], run.programs[r]).wait_ns);
  return wait;
}

std::size_t JobComparisonRow::shown_rank() const {
  if (run.timeline.feasible) return run.timeline.slowest;
  for (std::size_t r = 0; r < run.timeline.ranks.size(); ++r) {
    if (!run.timeline.ranks[r].feasible) return r;
  }
  return 0;
}

std::vector<std::size_t> JobComparison::ranking() const {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const JobComparisonRow& x = rows[a];
    const JobComparisonRow& y = rows[b];
    if (x.feasible() != y.feasible()) return x.feasible();
    return x.feasible() && x.step_ns() < y.step_ns();
  });
  return order;
}

JobComparisonRow run_job_policy(const Policy& policy, const sim::Job& job,
                                const std::vector<sim::Machine>& machines,
                                const std::vector<NetworkView>& views,
                                const EncodingOptions& encodings, sim::Nanoseconds ideal_ns,
                                const Stop* stop) {
  JobComparisonRow row;
  const auto start = std::chrono::steady_clock::now();
  // The ranks decide one after another: the comparison and the sweep run policies and cells in
  // parallel already.
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    Evaluator evaluator(job.ranks[r], machines[r]);
    evaluator.stop_when(stop);
    PolicyDecision decision = decide(policy, evaluator, views[r]);
    decision.plan = apply_encodings(decision.plan, views[r], encodings);
    row.decisions.push_back(std::move(decision));
  }
  row.decide_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.policy = row.decisions.front().plan.policy;
  row.run = sim::simulate_job(job, plans_of(row.decisions), machines, sim::EngineOptions::totals());
  if (row.feasible() && ideal_ns > 0) {
    row.overhead = static_cast<double>(row.step_ns()) / static_cast<double>(ideal_ns) - 1.0;
  }
  return row;
}

JobComparison compare_job_policies(const sim::Job& job, const std::vector<sim::Machine>& machines,
                                   const ComparisonOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  JobComparison result;
  const sim::JobRun ideal = sim::ideal_job_run(job, machines);
  result.ideal_ns = ideal.period_ns;
  result.ideal_slowest = ideal.timeline.slowest;
  const std::vector<NetworkView> views = views_of(job);
  const std::vector<Policy> all = policies_for(views.front());
  std::vector<std::optional<JobComparisonRow>> rows(all.size());
  const Stop stop{std::chrono::steady_clock::time_point::max(), options.cancel};
  std::mutex progress;
  std::size_t done = 0;
  // The costliest policies start first, as in compare_policies.
  std::vector<std::size_t> order(all.size());
  for (std::size_t p = 0; p < order.size(); ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].cost > all[b].cost; });
  const int threads = options.threads > 0 ? options.threads : tbb::task_arena::automatic;
  tbb::task_arena arena(arena_concurrency(threads));
  BoundOptions bound;  // every plan the rows may take: any placement, the encodings given
  bound.encodings = options.encodings;
  arena.execute([&] {
    parallel_each(
        0, order.size() + (options.lower_bound ? 1 : 0),
        [&](std::size_t k) {
          if (stop.due()) return;
          if (k == order.size()) {  // the lower bound, beside the policies
            result.lower_bound = job_lower_bound(job, machines, bound);
            return;
          }
          const std::size_t p = order[k];
          try {
            rows[p] = run_job_policy(all[p], job, machines, views, options.encodings,
                                     result.ideal_ns, &stop);
          } catch (const Stopped&) {
            return;
          }
          const std::lock_guard<std::mutex> lock(progress);
          ++done;
          if (options.on_progress) {
            const double elapsed =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            options.on_progress({std::string(all[p].name), done, all.size(), elapsed});
          }
        },
        Split::kOnePerTask);
  });
  for (std::optional<JobComparisonRow>& row : rows) {
    if (row) result.rows.push_back(std::move(*row));
  }
  result.cancelled = result.rows.size() < all.size();
  return result;
}

namespace {

// A row's step back to back against the job's lower bound; nullopt when it does not fit or there
// is no bound.
std::optional<double> row_gap(const JobComparison& comparison, const JobComparisonRow& row) {
  if (!comparison.lower_bound) return std::nullopt;
  return bound_gap(comparison.lower_bound->job, bounded_job_step(row.run));
}

}  // namespace

nlohmann::json job_comparison_json(const JobComparison& comparison, const sim::Job& job,
                                   const std::vector<sim::Machine>& machines) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::size_t> place(comparison.rows.size());
  const std::vector<std::size_t> order = comparison.ranking();
  for (std::size_t r = 0; r < order.size(); ++r) place[order[r]] = r + 1;
  for (std::size_t i = 0; i < comparison.rows.size(); ++i) {
    const JobComparisonRow& row = comparison.rows[i];
    const bool fits = row.feasible();
    nlohmann::json j = sim::job_summary_json(row.run, job, machines);
    bool gave_up = false;
    for (std::size_t r = 0; r < row.decisions.size(); ++r) {
      j["ranks"][r]["policy"] = row.decisions[r].plan.policy;
      j["ranks"][r]["note"] = row.decisions[r].note;
      j["ranks"][r]["gave_up"] = row.decisions[r].gave_up;
      gave_up = gave_up || row.decisions[r].gave_up;
    }
    const auto when = [fits](double value) {
      return fits ? nlohmann::json(value) : nlohmann::json(nullptr);
    };
    j["policy"] = row.policy;
    j["rank"] = place[i];
    j["overhead"] = when(row.overhead);
    const std::optional<double> gap = row_gap(comparison, row);
    j["gap"] = gap ? nlohmann::json(*gap) : nlohmann::json(nullptr);
    j["wait_s"] = when(sim::to_seconds(row.wait_ns()));
    j["decide_s"] = row.decide_s;
    j["gave_up"] = gave_up;
    rows.push_back(std::move(j));
  }
  nlohmann::json out = {{"ideal_s", sim::to_seconds(comparison.ideal_ns)},
                        {"ideal_slowest_rank", job.rank_of(comparison.ideal_slowest)},
                        {"world_size", job.world_size()}};
  if (comparison.lower_bound) {
    add_bound_fields(out, comparison.lower_bound->job);
    out["lower_bound_rank"] = setting_rank_json(*comparison.lower_bound, job);
  }
  out["rows"] = std::move(rows);
  return out;
}

std::string job_why_not(const JobComparisonRow& row, const sim::Job& job) {
  if (row.feasible()) return {};
  std::string out;
  for (std::size_t r = 0; r < row.run.timeline.ranks.size(); ++r) {
    const sim::Timeline& tl = row.run.timeline.ranks[r];
    if (tl.feasible) continue;
    const PolicyDecision& d = row.decisions[r];
    std::string why = sim::why_not_text(tl, row.run.programs[r], job.ranks[r]);
    if (why.empty()) why = d.gave_up ? "the policy gave up: " + d.note : std::string("did not fit");
    out += fmt::format("{}rank {}: {}", out.empty() ? "" : "\n", job.rank_of(r), why);
  }
  return out;
}

std::string job_comparison_text(const JobComparison& comparison, const sim::Job& job,
                                const std::vector<sim::Machine>& machines) {
  const sim::Machine& m = machines.front();
  const sim::Distributed d = job.ranks.front().distributed.value_or(sim::Distributed{});
  std::string out = fmt::format(
      "job {} of {} ranks{}, device memory {}, H2D {:.1f} GB/s, D2H {:.1f} GB/s; ideal step "
      "{:.3f} ms (rank {} the last to end alone)\n",
      job.ranks.size(), job.world_size(), d.backend.empty() ? "" : " (" + d.backend + ")",
      sim::format_bytes(m.memory_bytes), m.link.h2d_bytes_per_s / 1e9, m.link.d2h_bytes_per_s / 1e9,
      sim::to_milliseconds(comparison.ideal_ns), job.rank_of(comparison.ideal_slowest));
  if (comparison.lower_bound) out += job_bound_text(*comparison.lower_bound, job, {});
  out +=
      "step: the slowest rank's, back to back; gap: against the lower bound back to back; wait: "
      "what the ranks waited at collectives for a later peer, over every rank; peak: the largest "
      "rank's; actions: the slowest rank's plan\n";
  out += fmt::format(
      "{:<22} {:>4} {:>12} {:>9} {:>8} {:>7} {:>11} {:>12} {:>5} {:>5} {:>5} {:>5} {:>9}"
      "  note\n",
      "policy", "fits", "step", "overhead", "gap", "slowest", "wait", "peak", "keep", "swap",
      "recmp", "enc", "decide");
  for (const std::size_t i : comparison.ranking()) {
    const JobComparisonRow& row = comparison.rows[i];
    const bool fits = row.feasible();
    const std::size_t shown = row.shown_rank();
    const auto counts = row.decisions[shown].plan.action_counts();
    const std::optional<double> gap = row_gap(comparison, row);
    out += fmt::format(
        "{:<22} {:>4} {:>12} {:>9} {:>8} {:>7} {:>11} {:>12} {:>5} {:>5} {:>5} {:>5} {:>8.3f}s  "
        "{}\n",
        row.policy, fits ? "yes" : "no",
        fits ? fmt::format("{:.3f} ms", sim::to_milliseconds(row.step_ns())) : "-",
        fits ? fmt::format("{:+.1f}%", row.overhead * 100) : "-",
        gap ? fmt::format("{:+.1f}%", *gap * 100) : "-",
        fits ? std::to_string(job.rank_of(shown)) : "-",
        fits ? fmt::format("{:.3f} ms", sim::to_milliseconds(row.wait_ns())) : "-",
        fits ? sim::format_bytes(peak_bytes(row.run)) : "-", counts[0], counts[1], counts[2],
        counts[3], row.decide_s, row.decisions[shown].note);
    if (fits) continue;
    const std::string why = job_why_not(row, job);
    for (std::size_t at = 0; at < why.size();) {
      const std::size_t end = std::min(why.find('\n', at), why.size());
      out += fmt::format("{:<22} why not: {}\n", "", why.substr(at, end - at));
      at = end + 1;
    }
  }
  return out;
}

std::string job_comparison_csv(const JobComparison& comparison, const sim::Job& job) {
  std::string out =
      "policy,rank,feasible,step_s,slowest_rank,step_alone_s,wait_s,peak_bytes,"
      "peak_reserved_bytes,keep,swap,recompute,encode,decide_s,why_not\n";
  for (const JobComparisonRow& row : comparison.rows) {
    const bool fits = row.feasible();
    for (std::size_t r = 0; r < row.decisions.size(); ++r) {
      const sim::Timeline& tl = row.run.timeline.ranks[r];
      const auto counts = row.decisions[r].plan.action_counts();
      const auto seconds = [fits](sim::Nanoseconds ns) {
        return fits ? fmt::format("{:.9f}", sim::to_seconds(ns)) : std::string();
      };
      std::string why = sim::why_not_text(tl, row.run.programs[r], job.ranks[r]);
      if (!tl.feasible && why.empty()) why = "the policy gave up: " + row.decisions[r].note;
      out +=
          fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(row.policy),
                      job.rank_of(r), tl.feasible ? 1 : 0, seconds(row.step_ns()),
                      fits ? std::to_string(job.rank_of(row.run.timeline.slowest)) : std::string(),
                      seconds(tl.iteration_ns),
                      seconds(sim::collective_totals(tl, row.run.programs[r]).wait_ns),
                      tl.peak_bytes, tl.peak_reserved_bytes, counts[0], counts[1], counts[2],
                      counts[3], row.decide_s, csv_field(why));
    }
  }
  return out;
}

}  // namespace memplan::search
