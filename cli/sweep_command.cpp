// `memplan sweep`: traces x memory budgets x links x (policies and the search), one CSV row per
// cell (docs/sweep.md). Every input is read and checked before the first cell runs; the CSV is
// written only when the whole grid ran.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/output_file.hpp"
#include "cli/progress.hpp"
#include "search/sweep.hpp"
#include "sim/input_error.hpp"
#include "sim/trace_io.hpp"

namespace memplan::cli {

void add_sweep_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> traces;
    std::vector<std::string> memories;
    std::vector<std::string> links;
    std::vector<std::string> bandwidths;
    std::vector<std::string> policies;
    std::string encode;
    bool no_search = false;
    int threads = 0;
    double search_time_limit_s = 10.0;
    std::size_t search_rounds = 0;
    std::uint64_t seed = 1;
    std::string output;
    bool progress = false;
    bool quiet = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "sweep", "Run every policy and the search over a grid of traces, memories and links (CSV)");
  cmd->add_option("TRACE", options->traces, "trace files (format v1, see traces/FORMAT.md)")
      ->required();
  cmd->add_option("--memory", options->memories,
                  "device memory budgets, e.g. 4GiB,8GiB (default: each trace's)")
      ->delimiter(',')
      ->check(size_value());
  cmd->add_option("--link", options->links, "link presets, e.g. pcie3,nvlink2")->delimiter(',');
  cmd->add_option("--bandwidth", options->bandwidths,
                  "link bandwidths, both directions, e.g. 8GB/s,16GB/s (after the --link presets)")
      ->delimiter(',')
      ->check(bandwidth_value());
  cmd->add_option("--policies", options->policies,
                  "policies to run, e.g. vdnn-all,pooch (default: every policy)")
      ->delimiter(',');
  cmd->add_flag("--no-search", options->no_search, "leave the search out of the grid");
  cmd->add_option("--encode", options->encode,
                  "Gist encodings for the policies' kept maps and the search: binarize, sparse, "
                  "dpr, fp16, fp10, fp8, all");
  cmd->add_option("--threads", options->threads, "cells run at once (default: every core)")
      ->check(integer_in(1, kMaxThreads));
  cmd->add_option("--search-time-limit", options->search_time_limit_s,
                  "seconds for each search cell, seeding included (default 10)")
      ->check(seconds_up_to(kMaxTimeLimitS));
  cmd->add_option("--search-rounds", options->search_rounds,
                  "stop each search after this many rounds (default: until converged)")
      ->check(integer_in(1, kMaxRounds));
  cmd->add_option("--seed", options->seed, "seed of the search's move sampler (default 1)")
      ->check(integer_in(0, kMaxSeed));
  cmd->add_option("-o,--output", options->output,
                  "CSV file to write (default, or -: standard output)");
  auto* progress_flag = cmd->add_flag(
      "--progress", options->progress,
      "a progress line on standard error for every cell (default: a bar on a terminal, a line "
      "every 5 s otherwise)");
  add_quiet_flag(*cmd, options->quiet);
  progress_flag->excludes("--quiet");
  cmd->callback([options] {
    // A CSV that could not be written is found out before the grid runs, not after.
    check_output(options->output, "-o");
    search::SweepGrid grid;
    for (const std::string& path : options->traces) {
      grid.traces.push_back({path, sim::read_trace(path)});
      sim::require_sizes(grid.traces.back().workload, path);
    }
    for (const std::string& text : options->memories) {
      grid.memories.emplace_back(sim::parse_bytes(text, "--memory"));
    }
    grid.links = search::sweep_links(options->links, options->bandwidths);
    grid.policies = options->policies;
    grid.search = !options->no_search;

    search::SweepOptions so;
    so.threads = options->threads;
    so.encodings = search::parse_encoding_options(options->encode, "--encode");
    so.search.time_limit_s = options->search_time_limit_s;
    so.search.max_rounds = options->search_rounds;
    so.search.seed = options->seed;
    Progress progress(
        "sweep",
        options->progress ? Progress::Mode::kLines : Progress::mode_for(options->quiet, false),
        options->progress ? 0.0 : -1.0);
    so.on_progress = [&progress](const search::SweepProgress& p) {
      progress.update(p.done, p.total, "cells");
    };
    const std::vector<search::SweepRow> rows = search::run_sweep(grid, so);
    progress.finish();
    const std::string csv = search::sweep_csv(rows);
    if (options->output.empty() || options->output == "-") {
      fmt::print("{}", csv);
    } else {
      write_output(options->output, csv);
      fmt::print("wrote {} ({} rows)\n", options->output, rows.size());
    }
  });
}

}  // namespace memplan::cli
