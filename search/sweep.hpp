#pragma once
// Sweep: a grid of traces x device memory budgets x links x (policies and the search), every cell
// simulated by the same engine as `memplan compare` and `memplan search`, run in parallel with
// oneTBB and returned in grid order whatever the number of threads — what `memplan sweep` writes
// as one CSV for the notebooks (docs/sweep.md).
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "search/gist.hpp"
#include "search/plan_search.hpp"
#include "sim/machine.hpp"
#include "sim/workload.hpp"

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

struct SweepProgress {
  std::size_t done = 0;
  std::size_t total = 0;
  double elapsed_s = 0.0;
};

struct SweepOptions {
  int threads = 0;  // cells run at once (0: every core)
  EncodingOptions encodings;
  /// Settings of the search cells. Each search runs on one thread and deterministically (the
  /// sweep's parallelism is across cells), so a search cell depends on its seed and limits only.
  SearchOptions search;
  /// Called after every finished cell, from the thread that finished it (one call at a time).
  std::function<void(const SweepProgress&)> on_progress;
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

/// Validates the grid (policy names, at least one point on every axis), builds every machine,
/// then runs the cells. Rows come in grid order: trace, memory, link, then the policies in the
/// order of policies() followed by the search. Throws InputError before running anything.
std::vector<SweepRow> run_sweep(const SweepGrid& grid, const SweepOptions& options);

/// Header and one line per row; text fields quoted as RFC 4180 asks when they need it.
std::string sweep_csv(const std::vector<SweepRow>& rows);

}  // namespace memplan::search
