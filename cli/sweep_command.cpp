// `memplan sweep`: traces x memory budgets x links x (policies and the search), one CSV row per
// cell (docs/sweep.md); a grid of jobs (a trace of several ranks, --interconnects, --world-sizes)
// runs every rank of each cell together. Every input is read and checked before the first cell
// runs. With -o the CSV grows in grid order as cells finish, so a run stopped midway leaves the
// grid's first rows, and --resume runs only the rest. Under mpirun or srun the ranks share the
// cells (cli/sweep_ranks.hpp) and rank 0 writes.
#include <optional>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/input_limit_flags.hpp"
#include "cli/progress.hpp"
#include "cli/sweep_ranks.hpp"
#include "core/input_error.hpp"
#include "io/atomic_file.hpp"
#include "io/output_file.hpp"
#include "io/trace_io.hpp"
#include "requests/search_request.hpp"
#include "search/studies/sweep.hpp"

namespace memplan::cli {

namespace {

struct Options {
  std::vector<std::string> traces;
  requests::SweepRequest sweep;
  bool no_search = false;
  std::string output;
  bool progress = false;
  bool quiet = false;
  bool resume = false;
};

search::SweepGrid read_grid(const Options& options) {
  std::vector<search::SweepTrace> traces;
  for (const std::string& path : options.traces) {
    traces.push_back(search::sweep_trace(path, sim::read_job(path)));
  }
  return requests::sweep_grid(std::move(traces), options.sweep);
}

search::SweepOptions sweep_options(const Options& options) {
  if (options.resume && (options.output.empty() || options.output == "-")) {
    throw sim::InputError("--resume", "resumes the CSV of -o FILE: give -o");
  }
  return requests::sweep_options(options.sweep);
}

bool to_file(const Options& options) {
  return !options.output.empty() && options.output != "-";
}

// On rank 0, the -o file taken for this run (locked: Note [Growing file] in io/atomic_file.cpp,
// so that a second sweep on it is refused, not interleaved) and the rows of its CSV to keep with
// --resume (none when it did not exist); the number of them on every rank, or -1 on every rank
// when rank 0 could not take the file or found the CSV is not this grid's (rank 0 then throws,
// the others return -1 to stop quietly).
long long resumed_rows(const Options& options, const search::Sweep& sweep, SweepRanks& ranks,
                       std::optional<sim::GrowingFile>& file, std::vector<std::string>& kept) {
  if (ranks.root() && to_file(options)) {
    try {
      file.emplace(options.output, "-o");
      if (options.resume && file->existed()) {
        kept = sweep.finished_rows(file->contents(), options.output);
      }
    } catch (const sim::InputError&) {
      (void)ranks.broadcast(-1);
      ranks.finalize();
      throw;
    }
  }
  return ranks.broadcast(static_cast<long long>(kept.size()));
}

void run_sweep(const Options& options) {
  // A CSV that could not be written is found out before the grid runs, not after.
  std::vector<sim::InputFile> inputs;
  for (const std::string& trace : options.traces) inputs.push_back({trace, "TRACE"});
  sim::check_outputs({{options.output, "-o"}}, inputs);
  const search::SweepGrid grid = read_grid(options);
  const search::Sweep sweep(grid);
  const search::SweepOptions so = sweep_options(options);
  SweepRanks ranks;
  std::vector<std::string> kept;
  std::optional<sim::GrowingFile> file;  // rank 0's -o file
  const long long resumed = resumed_rows(options, sweep, ranks, file, kept);
  if (resumed < 0) return;
  const auto first = static_cast<std::size_t>(resumed);  // on every rank; `kept` is rank 0's

  Progress progress("sweep",
                    !ranks.root()      ? Progress::Mode::kOff
                    : options.progress ? Progress::Mode::kLines
                                       : Progress::mode_for(options.quiet, false),
                    options.progress ? 0.0 : -1.0);
  if (ranks.root() && ranks.size() > 1 && !options.quiet) {
    fmt::print(stderr, "sweep: {} MPI ranks share {} cells\n", ranks.size(), sweep.size() - first);
  }

  std::string csv = sweep.csv_header();
  for (const std::string& row : kept) csv += row;
  if (file) file->replace(csv);
  std::size_t written = kept.size();
  const auto on_rows = [&](const std::vector<std::string>& lines) {
    written += lines.size();
    std::string rows;
    for (const std::string& line : lines) rows += line;
    if (file) {
      file->append(rows);
    } else {
      csv += rows;
    }
  };
  ranks.run(sweep, first, so, on_rows, [&progress](std::size_t done, std::size_t total) {
    progress.update(done, total, "cells");
  });
  if (!ranks.root()) return;
  progress.finish();
  if (to_file(options)) {
    fmt::print("wrote {} ({} rows)\n", options.output, written);
  } else {
    fmt::print("{}", csv);
  }
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "sweep", "Run every policy and the search over a grid of traces, memories and links (CSV)");
  add_input_limit_flags(*cmd);
  cmd->add_option("TRACE", options->traces,
                  "trace files (formats v1 to v3, see traces/FORMAT.md): steps, or jobs' ranks")
      ->required();
  cmd->add_option("--memory", options->sweep.memories,
                  "device memory budgets, e.g. 4GiB,8GiB (default: each trace's)")
      ->delimiter(',')
      ->check(size_value());
  cmd->add_option("--link", options->sweep.links, "link presets, e.g. pcie3,nvlink2")
      ->delimiter(',');
  cmd->add_option("--bandwidth", options->sweep.bandwidths,
                  "link bandwidths, both directions, e.g. 8GB/s,16GB/s (after the --link presets)")
      ->delimiter(',')
      ->check(bandwidth_value());
  cmd->add_option("--interconnects", options->sweep.interconnects,
                  fmt::format("what prices a job's collectives, one grid point each: recorded, a "
                              "fabric ({}), or FABRIC+NETWORK ({})",
                              sim::fabric_preset_names(false), sim::fabric_preset_names(true)))
      ->delimiter(',');
  cmd->add_option("--gpus-per-node", options->sweep.gpus_per_node,
                  "GPUs a node holds for --interconnects (default 8)")
      ->check(integer_in(1, sim::kMaxGpusPerNode));
  cmd->add_option("--world-sizes", options->sweep.world_sizes,
                  "world sizes a one-rank job's collectives are priced for, e.g. 8,16,64")
      ->delimiter(',')
      ->check(integer_in(1, requests::kMaxWorldSize));
  cmd->add_option("--policies", options->sweep.policies,
                  "policies to run, e.g. vdnn-all,pooch (default: every policy)")
      ->delimiter(',');
  cmd->add_flag("--no-search", options->no_search, "leave the search out of the grid");
  cmd->add_option("--encode", options->sweep.encode,
                  "Gist encodings for the policies' kept maps and the search: binarize, sparse, "
                  "dpr, fp16, fp10, fp8, all");
  cmd->add_option("--threads", options->sweep.threads,
                  "cells run at once in this process (default: every core it may run on)")
      ->check(integer_in(1, kMaxThreads));
  cmd->add_option("--search-time-limit", options->sweep.search_time_limit_s,
                  "seconds for each search cell, seeding included (default 10)")
      ->check(seconds_up_to(kMaxTimeLimitS));
  cmd->add_option("--search-rounds", options->sweep.search_rounds,
                  "stop each search after this many rounds (default: until converged)")
      ->check(integer_in(1, kMaxRounds));
  cmd->add_option("--seed", options->sweep.seed, "seed of the search's move sampler (default 1)")
      ->check(integer_in(0, kMaxSeed));
  cmd->add_option("-o,--output", options->output,
                  "CSV file to write (default, or -: standard output)");
  auto* progress_flag = cmd->add_flag(
      "--progress", options->progress,
      "a progress line on standard error for every cell (default: a bar on a terminal, a line "
      "every 5 s otherwise)");
  cmd->add_flag("--deterministic", options->sweep.deterministic,
                "every column a function of the inputs: decide_s written as 0 (needs "
                "--search-rounds or --no-search, since a search stopped by the clock is not)");
  cmd->add_flag("--resume", options->resume,
                "keep the rows the -o CSV already holds (a sweep of the same grid stopped midway) "
                "and run the rest");
  add_quiet_flag(*cmd, options->quiet);
  progress_flag->excludes("--quiet");
  cmd->callback([options] {
    options->sweep.search = !options->no_search;
    run_sweep(*options);
  });
}

}  // namespace memplan::cli
