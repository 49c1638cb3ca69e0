#pragma once
// Sweep: a grid of traces x device memory budgets x links x (policies and the search), every cell
// simulated by the same engine as `memplan compare` and `memplan search`, run in parallel with
// oneTBB and returned in grid order whatever the number of threads — what `memplan sweep` writes
// as one CSV for the notebooks (docs/sweep.md). A grid of jobs (a trace of several ranks, or the
// job axes: interconnects and world sizes) runs each cell on every rank together, as `memplan
// compare` and `memplan search` do with a job, and writes the job's columns too.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "core/workload.hpp"
#include "search/engine/plan_search.hpp"
#include "search/policies/gist.hpp"

namespace memplan::search {

struct SweepTrace {
  std::string name;        // how the trace is named in the CSV (the path given)
  sim::Workload workload;  // the step, or a job's first rank
  /// A job's other ranks in rank order (trace format v3 `ranks`); empty for the step of one GPU
  /// or one rank whose peers are assumed alike.
  std::vector<sim::Workload> more_ranks = {};
};

/// A trace file read as a job (sim::read_job) as a trace of the grid named `name`: its first rank,
/// the others as more_ranks. Throws InputError naming `name` when a rank has no tensor sizes
/// (sim::require_sizes: the grid plans memory).
SweepTrace sweep_trace(std::string name, sim::Job job);

/// One point of the interconnect axis of a grid of jobs: what prices the collectives.
struct SweepInterconnect {
  std::string label;                // as given: "recorded", a fabric preset, or "FABRIC+NETWORK"
  sim::MachineOverrides overrides;  // its interconnect, network and gpus_per_node
};

/// The interconnect axis from `--interconnects` values: `recorded` (each collective's recorded
/// time), an intra-node fabric preset (nvlink4), or one with a network between nodes
/// (nvlink4+ib-ndr); `gpus_per_node` for each that names a fabric. Throws InputError naming
/// `--interconnects` (or `--gpus-per-node`) for an unknown preset or a bad count.
std::vector<SweepInterconnect> sweep_interconnects(const std::vector<std::string>& names,
                                                   std::optional<std::int32_t> gpus_per_node);

/// `job` (one rank whose peers are assumed alike) as a rank of a job of `world_size` ranks:
/// `distributed.world_size` set, and each collective whose group spans every rank of the old world
/// spanning every rank of the new one, so that the interconnect prices its collectives for that
/// many ranks (their message sizes stay as recorded). Throws InputError naming `--world-sizes`
/// and `source` for a job of several ranks, a step without `distributed`, or a world that does
/// not hold the rank or one of its groups' ranks.
sim::Job with_world_size(const sim::Job& job, std::int32_t world_size, std::string_view source);

/// One point of the link axis: the trace's own link, a preset, or one bandwidth in both directions.
struct SweepLink {
  std::string label;  // "trace", the preset name, or the bandwidth as written ("8GB/s")
  sim::MachineOverrides overrides;
};

/// The link axis from `--link` preset names and `--bandwidth` values, presets first, each in the
/// order given; the trace's own link alone when both are empty. Throws InputError naming the flag
/// for an unknown preset or a bad bandwidth.
std::vector<SweepLink> sweep_links(const std::vector<std::string>& presets,
                                   const std::vector<std::string>& bandwidths);

struct SweepGrid {
  std::vector<SweepTrace> traces;
  std::vector<std::optional<sim::Bytes>> memories;  // std::nullopt: the trace's device memory
  std::vector<SweepLink> links;
  std::vector<std::string> policies;  // names from policies(); empty: every policy
  bool search = true;                 // one more column of cells: the plan search
  /// A grid of jobs' axes: what prices the collectives (empty: their recorded times) and the
  /// world sizes a one-rank job is priced for (empty: each trace's own).
  std::vector<SweepInterconnect> interconnects;
  std::vector<std::int32_t> world_sizes;

  /// Whether this is a grid of jobs: a job axis is given, or a trace holds several ranks. Its
  /// cells run every rank together and its CSV has the job's columns.
  [[nodiscard]] bool jobs() const;
};

struct SweepRow;

struct SweepProgress {
  std::size_t done = 0;
  std::size_t total = 0;
  double elapsed_s = 0.0;
};

struct SweepOptions {
  int threads = 0;  // cells run at once (0: every core this process may run on)
  EncodingOptions encodings;
  /// Settings of the search cells. Each search runs on one thread and deterministically (the
  /// sweep's parallelism is across cells), so a search cell depends on its seed and limits only.
  SearchOptions search;
  /// Every column a function of the inputs: `decide_s` (a wall-clock time) is written as 0.
  bool deterministic = false;
  /// Called after every finished cell, from the thread that finished it (one call at a time).
  std::function<void(const SweepProgress&)> on_progress;
  /// Called with every finished cell's row and its position in the cells run, from the thread
  /// that finished it (one call at a time, before on_progress).
  std::function<void(std::size_t, const SweepRow&)> on_row;
};

struct SweepRow {
  std::string trace;
  sim::Bytes memory_bytes = 0;
  std::string link;
  sim::BytesPerSecond h2d_bytes_per_s = 0;
  sim::BytesPerSecond d2h_bytes_per_s = 0;
  std::string policy;  // the policy's plan name (e.g. "vdnn-all", "pooch+gist"), or "search"
  bool feasible = false;
  sim::Nanoseconds step_ns = 0;   // back to back (ComparisonRow::step_ns)
  sim::Nanoseconds ideal_ns = 0;  // in-core with unlimited device memory on the same link
  double overhead = 0.0;          // step / ideal step - 1, when feasible
  sim::Bytes peak_bytes = 0;
  std::size_t keep = 0, swap = 0, recompute = 0, encode = 0;
  double decide_s = 0.0;  // wall-clock time the policy (or the whole search) took
  std::string note;       // the policy's note; for the search, the policy it started from
  std::string why_not;    // the out-of-memory diagnosis when not feasible
  // A grid of jobs' cells (SweepGrid::jobs): step_ns and ideal_ns are the job's step (its
  // slowest rank's), peak_bytes the largest rank's, the actions the slowest rank's plan's (the
  // first rank that does not fit when one does not), why_not each such rank's diagnosis.
  bool job = false;          // the job's columns are written
  std::string interconnect;  // the interconnect axis' label, "recorded" without one
  std::int32_t world_size = 1;
  std::int32_t slowest_rank = -1;  // the rank that sets the step (-1 when it does not fit)
  sim::Nanoseconds wait_ns = 0;    // what the ranks waited at collectives, over every rank
};

/// A validated grid, its cells numbered in grid order: trace, memory, link, then the policies in
/// the order of policies() followed by the search. Any subset of the cells can be run, so that a
/// caller can share them among processes (cli/sweep_ranks.hpp) or skip rows it already has.
class Sweep {
 public:
  /// Validates the grid (policy names, at least one point on every axis) and builds every
  /// machine. Throws InputError naming the flag. `grid` must outlive the Sweep.
  explicit Sweep(const SweepGrid& grid);
  ~Sweep();
  Sweep(const Sweep&) = delete;
  Sweep& operator=(const Sweep&) = delete;

  [[nodiscard]] std::size_t size() const;
  /// The CSV's header for this grid (sweep_csv_header(grid.jobs())).
  [[nodiscard]] std::string csv_header() const;

  /// Runs `cells` (indices below size()) in parallel; their rows in the order given. Progress
  /// counts these cells only.
  [[nodiscard]] std::vector<SweepRow> run(const std::vector<std::size_t>& cells,
                                          const SweepOptions& options) const;

  /// The rows of a CSV this grid's sweep wrote, possibly cut short (a run stopped midway), to
  /// resume from: its records after the header, newlines included, which are the grid's first
  /// cells in order (same trace, memory, link and policy; the other columns are taken as they
  /// are). A last record without its newline is dropped. Throws InputError naming `source` and
  /// the line for a header or a row that is not this grid's.
  [[nodiscard]] std::vector<std::string> finished_rows(const std::string& csv,
                                                       const std::string& source) const;

  struct Impl;  // the grid's machines and cells (search/studies/sweep.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

/// Every cell of the grid: Sweep(grid).run(0 .. size-1). Throws InputError before running anything.
std::vector<SweepRow> run_sweep(const SweepGrid& grid, const SweepOptions& options);

/// The CSV's first line, newline included; a grid of jobs' has the columns `interconnect` and
/// `world_size` after `link`, and `slowest_rank` and `wait_s` last.
std::string sweep_csv_header(bool jobs = false);
/// One row as a CSV line, newline included (with the job's columns when row.job); text fields
/// quoted as RFC 4180 asks when they need it.
std::string sweep_csv_line(const SweepRow& row);
/// Header and one line per row (the job's header when the rows are a grid of jobs').
std::string sweep_csv(const std::vector<SweepRow>& rows);

}  // namespace memplan::search
