#pragma once
// Sweep: a grid of traces x device memory budgets x links x (policies and the search), every cell
// simulated by the same engine as `memplan compare` and `memplan search`, run in parallel with
// oneTBB and returned in grid order whatever the number of threads — what `memplan sweep` writes
// as one CSV for the notebooks (docs/sweep.md).
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/machine.hpp"
#include "core/workload.hpp"
#include "search/engine/plan_search.hpp"
#include "search/policies/gist.hpp"

namespace memplan::search {

struct SweepTrace {
  std::string name;  // how the trace is named in the CSV (the path given)
  sim::Workload workload;
};

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
  sim::Nanoseconds iteration_ns = 0;
  sim::Nanoseconds ideal_ns = 0;  // in-core with unlimited device memory on the same link
  double overhead = 0.0;          // iteration / ideal - 1, when feasible
  sim::Bytes peak_bytes = 0;
  std::size_t keep = 0, swap = 0, recompute = 0, encode = 0;
  double decide_s = 0.0;  // wall-clock time the policy (or the whole search) took
  std::string note;       // the policy's note; for the search, the policy it started from
  std::string why_not;    // the out-of-memory diagnosis when not feasible
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

/// The CSV's first line, newline included.
std::string sweep_csv_header();
/// One row as a CSV line, newline included; text fields quoted as RFC 4180 asks when they need it.
std::string sweep_csv_line(const SweepRow& row);
/// Header and one line per row.
std::string sweep_csv(const std::vector<SweepRow>& rows);

}  // namespace memplan::search
