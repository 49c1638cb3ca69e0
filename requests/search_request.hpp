#pragma once
// SearchRequest and SweepRequest: what a user asks of `memplan search` and `memplan sweep` (and
// of memplan.search / memplan.sweep in Python), checked and turned into the engine's options in
// one place. The ranges below are the CLI's too (cli/flag_checks.hpp checks them while parsing,
// so that a bad flag is refused before any file is read); the Python API meets them here.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "requests/machine_request.hpp"
#include "search/engine/plan_search.hpp"
#include "search/studies/sweep.hpp"

namespace memplan::requests {

/// Worker threads, seconds of search, rounds, seeds.
inline constexpr std::int64_t kMaxThreads = 1024;
inline constexpr double kMaxTimeLimitS = 7 * 86'400.0;  // a week
inline constexpr std::int64_t kMaxRounds = 1'000'000'000;
inline constexpr std::int64_t kMaxSeed = std::numeric_limits<std::int64_t>::max();
/// The largest world `--world-sizes` takes (the trace format's limit).
inline constexpr std::int32_t kMaxWorldSize = std::int32_t{1} << 20;

struct SearchRequest {
  int threads = 0;  // 0: every core
  double time_limit_s = 10.0;
  std::optional<std::int64_t> rounds;  // none: until converged or out of time
  std::uint64_t seed = 1;
  bool deterministic = false;
  bool maps_only = false;  // feature maps only: no host placement
  std::string encode;      // Gist encodings the search may use ("binarize,sparse", "all")
  /// Stop once within this of the lower bound (SearchOptions::gap): a fraction (0.005) or a
  /// percentage ("0.5%").
  Quantity gap = 0.005;
};

/// The most --gap takes: 100, ten thousand percent (a search that stops after its seeding).
inline constexpr double kMaxGap = 100.0;
/// --gap's value as a fraction: a number (0.005) or a percentage ("0.5%", "0.5 %"), in
/// [0, kMaxGap]. Throws InputError naming `flag`.
double gap_of(const Quantity& gap, std::string_view flag);

/// The engine's options for the request. Throws InputError naming the flag (--threads,
/// --time-limit, --rounds, --seed, --encode, --gap) of a value out of its range (rounds, when
/// given, from 1: 0 rounds is refused, not taken for "until converged").
search::SearchOptions search_options(const SearchRequest& request);

struct SweepRequest {
  std::vector<Quantity> memories;       // bytes; empty: each trace's device
  std::vector<std::string> links;       // presets
  std::vector<std::string> bandwidths;  // one bandwidth both ways per point, its label in the CSV
  std::vector<std::string> policies;    // empty: every policy
  /// A grid of jobs' axes: interconnects ("recorded", a fabric preset, or FABRIC+NETWORK) with
  /// the GPUs per node they assume, and world sizes for one rank whose peers are assumed alike.
  std::vector<std::string> interconnects;
  std::optional<std::int32_t> gpus_per_node;
  std::vector<std::int32_t> world_sizes;
  bool search = true;          // a search cell beside the policies'
  bool deterministic = false;  // the same CSV for any number of threads and ranks
  int threads = 0;
  std::string encode;
  double search_time_limit_s = 10.0;
  std::optional<std::int64_t> search_rounds;  // none: until converged or out of time
  std::uint64_t seed = 1;
};

/// The grid of `traces` (read by the caller) under the request. Throws InputError (naming
/// --gpus-per-node given without --interconnects, and a world size out of 1 to 2^20).
search::SweepGrid sweep_grid(std::vector<search::SweepTrace> traces, const SweepRequest& request);
/// The sweep's options. Throws InputError naming the flag (--search-time-limit, --threads, ...;
/// --deterministic with search cells needs --search-rounds: they would stop by the clock).
search::SweepOptions sweep_options(const SweepRequest& request);

}  // namespace memplan::requests
