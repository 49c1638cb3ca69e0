// `memplan search`: the best plan the search finds, starting from every policy; for a job of
// several ranks (trace format v3), the plan searched on the slowest rank among its peers and
// shared by the ranks it applies to, or a policy's per-rank plans (search/studies/job_search.hpp),
// with the job's lower bound.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/input_limit_flags.hpp"
#include "cli/machine_flags.hpp"
#include "cli/progress.hpp"
#include "core/input_error.hpp"
#include "io/output_file.hpp"
#include "io/plan_io.hpp"
#include "io/timeline_export.hpp"
#include "io/trace_io.hpp"
#include "requests/search_request.hpp"
#include "search/engine/exact.hpp"
#include "search/engine/plan_search.hpp"
#include "search/studies/job_search.hpp"

namespace memplan::cli {

namespace {

struct SearchFlags {
  std::string trace;
  MachineFlags machine;
  requests::SearchRequest search;
  std::string gap = "0.5%";  // into search.gap
  bool exact = false;
  std::string output;
  bool json = false;
  bool quiet = false;
};

// The plan is written only when it fits: a run that exits 1 leaves no file.
void write_plan_if_fits(const SearchFlags& flags, const sim::Timeline& timeline,
                        const sim::Plan& plan, const sim::Workload& workload) {
  if (!flags.output.empty() && timeline.feasible) {
    sim::write_output(flags.output, sim::write_plan(plan, workload));
  }
}

// The closing line of the human-readable summary: the plan found against the best policy's.
void print_against_best_policy(std::FILE* report, const std::string& best_policy,
                               const search::Evaluation& policy, const sim::Timeline& timeline) {
  if (policy.feasible && timeline.feasible) {
    const double policy_s = sim::to_seconds(policy.step_ns);
    const double found_s = sim::to_seconds(timeline.period_ns);
    // A step of no time (a trace without ops) is 0% faster than a policy of no time.
    const double change = policy_s > 0 ? (found_s / policy_s - 1.0) * 100 : 0.0;
    fmt::print(report, "against the best policy ({}): {:.3f} ms -> {:.3f} ms ({:+.1f}%)\n",
               best_policy, policy_s * 1e3, found_s * 1e3, change);
  } else {
    fmt::print(report, "best policy: {} ({})\n", best_policy,
               policy.feasible ? "fits" : "does not fit");
  }
}

// The --json summary both searches start from: the plan found and the best policy's.
nlohmann::json search_json(const sim::Simulation& found, const std::string& policy,
                           const std::string& best_policy, const search::Evaluation& best,
                           const sim::Workload& workload, const sim::Machine& machine) {
  nlohmann::json j = sim::summary_json(found.timeline, found.program, workload, machine);
  j["policy"] = policy;
  j["best_policy"] = best_policy;
  j["best_policy_feasible"] = best.feasible;
  j["best_policy_step_s"] =
      best.feasible ? nlohmann::json(sim::to_seconds(best.step_ns)) : nlohmann::json(nullptr);
  return j;
}

// The lower bound and the plan's gap to it (search/bound/lower_bound.hpp), when the search gave
// one.
void add_bound(nlohmann::json& j, const std::optional<search::LowerBound>& bound,
               const sim::Timeline& timeline) {
  if (bound) search::add_bound_json(j, *bound, search::bounded_step(timeline));
}
void print_bound(std::FILE* report, const std::optional<search::LowerBound>& bound,
                 const sim::Timeline& timeline) {
  if (bound) {
    fmt::print(report, "{}", search::bound_text(*bound, search::bounded_step(timeline)));
  }
}

// Exit 0 when the plan found fits; else 1, with the diagnosis on stderr (in the JSON with --json).
int fit_status(const SearchFlags& flags, const sim::Simulation& found,
               const sim::Workload& workload) {
  if (found.timeline.feasible) return 0;
  if (!flags.json) {
    fmt::print(stderr, "memplan: no plan found that fits (no plan written): {}\n",
               sim::why_not_text(found.timeline, found.program, workload));
  }
  return 1;
}

// `search --exact`: prints like the heuristic search, plus what the branch and bound did.
int run_exact(const sim::Workload& workload, const sim::Machine& machine,
              const search::ExactOptions& eo, const SearchFlags& flags) {
  const search::ExactResult result = search::solve_exact(workload, machine, eo, flags.trace);
  const sim::Program& program = result.simulation.program;
  const sim::Timeline& timeline = result.simulation.timeline;
  write_plan_if_fits(flags, timeline, result.plan, workload);
  std::FILE* report = sim::report_stream({flags.output});
  if (flags.json) {
    nlohmann::json j = search_json(result.simulation, result.plan.policy, result.best_policy,
                                   result.best_policy_evaluation, workload, machine);
    j["evaluated"] = result.evaluated;
    j["exact"] = true;
    j["optimal"] = result.optimal;
    j["from_heuristic"] = result.from_heuristic;
    j["heuristic_step_s"] =
        result.heuristic_evaluation.feasible
            ? nlohmann::json(sim::to_seconds(result.heuristic_evaluation.step_ns))
            : nlohmann::json(nullptr);
    j["space_plans"] = result.space_plans;
    j["explored"] = result.explored;
    j["pruned_memory"] = result.pruned_memory;
    j["pruned_time"] = result.pruned_time;
    j["pruned_lower_bound"] = result.pruned_lower_bound;
    j["lower_bound_solves"] = result.lower_bound_solves;
    j["solved_by_bound"] = result.solved_by_bound;
    j["bound_violations"] = result.bound_violations;
    j["search_s"] = result.elapsed_s;
    j["time_limit_s"] =
        result.time_limit_s > 0 ? nlohmann::json(result.time_limit_s) : nlohmann::json(nullptr);
    add_bound(j, result.lower_bound, timeline);
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "{}",
               sim::summary_text(timeline, program, workload, machine, "search --exact"));
    print_against_best_policy(report, result.best_policy, result.best_policy_evaluation, timeline);
    print_bound(report, result.lower_bound, timeline);
    const std::string stopped =
        result.default_time_limit
            ? fmt::format(
                  "stopped by the default {:g} s time limit of more than {} feature maps "
                  "(not proven optimal; --time-limit gives it more)",
                  result.time_limit_s, search::kExactUnlimitedMaps)
            : std::string("stopped by the time limit (not proven optimal)");
    fmt::print(report,
               "{}: {:.3g} plans in the space, {} nodes explored, {} plans evaluated in {:.2f} s\n",
               result.optimal ? std::string("optimal") : stopped, result.space_plans,
               result.explored, result.evaluated, result.elapsed_s);
    if (result.from_heuristic && timeline.feasible)
      fmt::print(report, "no plan of the space is faster than the heuristic search's\n");
  }
  return fit_status(flags, result.simulation, workload);
}

// The heuristic search (search_plan), with a progress line while it runs.
int run_search(const sim::Workload& workload, const sim::Machine& machine, search::SearchOptions so,
               const SearchFlags& flags) {
  Progress progress("search", Progress::mode_for(flags.quiet, flags.json));
  so.on_progress = [&progress](const search::SearchProgress& p) {
    progress.update(
        p.round, 0,
        fmt::format("rounds, best {}, {} plans, {:.0f} plans/s",
                    p.best.feasible
                        ? fmt::format("{:.3f} ms", sim::to_seconds(p.best.step_ns) * 1e3)
                        : std::string("no fit"),
                    p.evaluated, static_cast<double>(p.evaluated) / std::max(p.elapsed_s, 1e-9)));
  };
  const search::SearchResult result = search::search_plan(workload, machine, so);
  progress.finish();

  const sim::Program& program = result.simulation.program;
  const sim::Timeline& timeline = result.simulation.timeline;
  write_plan_if_fits(flags, timeline, result.plan, workload);
  std::FILE* report = sim::report_stream({flags.output});
  if (flags.json) {
    nlohmann::json j = search_json(result.simulation, result.plan.policy, result.best_policy,
                                   result.best_policy_evaluation, workload, machine);
    j["evaluated"] = result.evaluated;
    j["rounds"] = result.rounds;
    j["converged"] = result.converged;
    j["within_gap"] = result.within_gap;
    j["search_s"] = result.elapsed_s;
    for (const search::SkippedPolicy& s : result.skipped)
      j["skipped_policies"][s.policy] = s.reason;
    add_bound(j, result.lower_bound, timeline);
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "{}", sim::summary_text(timeline, program, workload, machine, "search"));
    print_against_best_policy(report, result.best_policy, result.best_policy_evaluation, timeline);
    print_bound(report, result.lower_bound, timeline);
    fmt::print(report, "{} plans evaluated in {:.2f} s over {} rounds ({})\n", result.evaluated,
               result.elapsed_s, result.rounds, search::stop_reason(result, so.gap));
  }
  return fit_status(flags, result.simulation, workload);
}

// A job of several ranks: each rank's machine from the same flags; -o writes the ranks' plans (a
// job plan file, io/plan_io.hpp) when every rank fits.
int run_job_search(const sim::Job& job, const search::SearchOptions& so, const SearchFlags& flags) {
  sim::require_sizes(job, flags.trace);
  const std::vector<sim::Machine> machines = machines_from_flags(job, flags.machine);
  Progress progress("search", Progress::mode_for(flags.quiet, flags.json));
  progress.stage(fmt::format("searching a plan for a job of {} ranks", job.ranks.size()));
  const search::JobSearchResult result = search::search_job(job, machines, so);
  progress.finish();
  const bool fits = result.run.timeline.feasible;
  if (!flags.output.empty() && fits) {
    sim::write_output(flags.output, sim::write_job_plan(result.plans(), job));
  }
  std::FILE* report = sim::report_stream({flags.output});
  if (flags.json) {
    fmt::print(report, "{}\n", search::job_search_json(result, job, machines).dump(2));
  } else {
    fmt::print(report, "{}", search::job_search_text(result, job, machines));
  }
  if (fits) return 0;
  if (!flags.json)
    fmt::print(stderr, "memplan: no plan found that fits every rank (no plan written)\n");
  return 1;
}

// `memplan search`'s flags into `flags`; returns --time-limit's option (whether it was given
// decides --exact's limit).
CLI::Option* add_search_flags(CLI::App& cmd, SearchFlags& flags) {
  cmd.add_option("TRACE", flags.trace,
                 "trace file (formats v1 to v3, see traces/FORMAT.md): one step, or a job's ranks")
      ->required();
  add_machine_flags(cmd, flags.machine);
  cmd.add_option("--encode", flags.search.encode,
                 "Gist encodings the search may use: binarize, sparse, dpr, fp16, fp10, fp8, all");
  cmd.add_option("--threads", flags.search.threads, "worker threads (default: every core)")
      ->check(integer_in(1, kMaxThreads));
  auto* time_limit =
      cmd.add_option("--time-limit", flags.search.time_limit_s,
                     fmt::format("seconds for the whole search, seeding included "
                                 "(default 10; with --exact: none up to {} "
                                 "feature maps, {:g} beyond)",
                                 search::kExactUnlimitedMaps, search::kExactDefaultTimeLimitS))
          ->check(seconds_up_to(kMaxTimeLimitS));
  cmd.add_option("--rounds", flags.search.rounds,
                 "stop after this many rounds (default: until converged)")
      ->check(integer_in(1, kMaxRounds));
  cmd.add_option("--seed", flags.search.seed, "seed of the move sampler (default 1)")
      ->check(integer_in(0, kMaxSeed));
  cmd.add_flag("--deterministic", flags.search.deterministic,
               "the same plan for any number of threads");
  cmd.add_option("--gap", flags.gap,
                 "stop once the plan is within this of the lower bound, a fraction or a "
                 "percentage (default 0.5%; 0: only at the bound; a step with a host side, of "
                 "its step back to back; a job: no rank is searched when a policy's plans are "
                 "within it of the job's bound)")
      ->check(gap_value());
  cmd.add_flag("--exact", flags.exact,
               fmt::format("the optimal plan by branch and bound (at most {} feature maps)",
                           search::kExactMaxMaps));
  cmd.add_flag("--maps-only", flags.search.maps_only,
               "plan feature maps only: keep parameters, gradients, optimizer state and the input "
               "batch on the device and the update there");
  cmd.add_option("-o,--output", flags.output,
                 "write the plan found (JSON; - for standard output), only when it fits; for a "
                 "job, each rank's plan (a job plan file)");
  cmd.add_flag("--json", flags.json, "print one JSON object");
  add_quiet_flag(cmd, flags.quiet);
  return time_limit;
}

}  // namespace

void add_search_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<SearchFlags>();
  auto* cmd = app.add_subcommand("search", "Search for a plan better than every policy's");
  add_input_limit_flags(*cmd);
  CLI::Option* time_limit = add_search_flags(*cmd, *options);
  cmd->callback([options, time_limit, &exit_status] {
    options->search.gap = options->gap;
    sim::check_outputs({{options->output, "-o"}}, {{options->trace, "TRACE"}});
    sim::Job job = sim::read_job(options->trace);
    if (job.ranks.size() > 1) {
      if (options->exact) {
        throw sim::InputError("--exact", fmt::format("{} holds a job of {} ranks, and exact mode "
                                                     "solves one rank's step: search the job "
                                                     "without --exact",
                                                     options->trace, job.ranks.size()));
      }
      exit_status = run_job_search(job, requests::search_options(options->search), *options);
      return;
    }
    const sim::Workload workload = std::move(job.ranks.front());
    sim::require_sizes(workload, options->trace);
    const sim::Machine machine = machine_from_flags(workload, options->machine);
    search::SearchOptions so = requests::search_options(options->search);
    if (options->exact) {
      search::ExactOptions eo;
      eo.threads = options->search.threads;
      if (time_limit->count() > 0) eo.time_limit_s = options->search.time_limit_s;
      eo.encodings = so.encodings;
      exit_status = run_exact(workload, machine, eo, *options);
      return;
    }
    exit_status = run_search(workload, machine, std::move(so), *options);
  });
}

}  // namespace memplan::cli
