#include "requests/search_request.hpp"

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "core/input_error.hpp"
#include "search/policies/gist.hpp"

namespace memplan::requests {
namespace {

void check_threads(int threads, std::string_view flag) {
  if (threads < 0 || threads > kMaxThreads) {
    throw sim::InputError(std::string(flag), fmt::format("{} is not in [1, {}] (0: every core)",
                                                         threads, kMaxThreads));
  }
}

void check_time_limit(double seconds, std::string_view flag) {
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > kMaxTimeLimitS) {
    throw sim::InputError(std::string(flag), fmt::format("{} is not a number of seconds in (0, {}]",
                                                         seconds, kMaxTimeLimitS));
  }
}

// Rounds as the engine counts them (0: until converged), from a count that is absent or in
// [1, kMaxRounds].
std::size_t checked_rounds(const std::optional<std::int64_t>& rounds, std::string_view flag) {
  if (!rounds) return 0;
  if (*rounds < 1 || *rounds > kMaxRounds) {
    throw sim::InputError(std::string(flag),
                          fmt::format("{} is not a whole number from 1 to {} (leave it out to "
                                      "search until converged)",
                                      *rounds, kMaxRounds));
  }
  return static_cast<std::size_t>(*rounds);
}

void check_seed(std::uint64_t seed) {
  if (seed > static_cast<std::uint64_t>(kMaxSeed)) {
    throw sim::InputError("--seed", fmt::format("{} is over {}", seed, kMaxSeed));
  }
}

}  // namespace

double gap_of(const Quantity& gap, std::string_view flag) {
  double value = 0;
  std::string text;
  if (const double* given = std::get_if<double>(&gap)) {
    value = *given;
    text = fmt::format("{}", value);
  } else {
    text = std::get<std::string>(gap);
    std::string_view number = text;
    while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
    const bool percent = !number.empty() && number.back() == '%';
    if (percent) number.remove_suffix(1);
    while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (number.empty() || error != std::errc() || end != number.data() + number.size()) {
      throw sim::InputError(std::string(flag),
                            fmt::format("'{}' is not a gap, like 0.5% or 0.005", text));
    }
    if (percent) value /= 100.0;
  }
  if (!std::isfinite(value) || value < 0 || value > kMaxGap) {
    throw sim::InputError(std::string(flag), fmt::format("{} is not a gap from 0 to {} ({:.0f}%)",
                                                         text, kMaxGap, kMaxGap * 100));
  }
  return value;
}

search::SearchOptions search_options(const SearchRequest& request) {
  check_threads(request.threads, "--threads");
  check_time_limit(request.time_limit_s, "--time-limit");
  check_seed(request.seed);
  search::SearchOptions options;
  options.threads = request.threads;
  options.time_limit_s = request.time_limit_s;
  options.max_rounds = checked_rounds(request.rounds, "--rounds");
  options.seed = request.seed;
  options.deterministic = request.deterministic;
  options.host_placement = !request.maps_only;
  options.encodings = search::parse_encoding_options(request.encode, "--encode");
  options.gap = gap_of(request.gap, "--gap");
  return options;
}

search::SweepGrid sweep_grid(std::vector<search::SweepTrace> traces, const SweepRequest& request) {
  search::SweepGrid grid;
  grid.traces = std::move(traces);
  for (const Quantity& memory : request.memories) {
    grid.memories.emplace_back(bytes_of(memory, "--memory"));
  }
  grid.links = search::sweep_links(request.links, request.bandwidths);
  grid.policies = request.policies;
  grid.search = request.search;
  if (request.gpus_per_node && request.interconnects.empty()) {
    throw sim::InputError("--gpus-per-node",
                          "says how --interconnects places the ranks: give "
                          "--interconnects too");
  }
  grid.interconnects = search::sweep_interconnects(request.interconnects, request.gpus_per_node);
  for (const std::int32_t size : request.world_sizes) {
    if (size < 1 || size > kMaxWorldSize) {
      throw sim::InputError("--world-sizes",
                            fmt::format("{} is out of range (1 to {})", size, kMaxWorldSize));
    }
  }
  grid.world_sizes = request.world_sizes;
  return grid;
}

search::SweepOptions sweep_options(const SweepRequest& request) {
  check_threads(request.threads, "--threads");
  check_time_limit(request.search_time_limit_s, "--search-time-limit");
  const std::size_t rounds = checked_rounds(request.search_rounds, "--search-rounds");
  check_seed(request.seed);
  if (request.deterministic && request.search && rounds == 0) {
    throw sim::InputError("--deterministic",
                          "search cells stop by the clock: give --search-rounds or --no-search");
  }
  search::SweepOptions options;
  options.threads = request.threads;
  options.deterministic = request.deterministic;
  options.encodings = search::parse_encoding_options(request.encode, "--encode");
  options.search.time_limit_s = request.search_time_limit_s;
  options.search.max_rounds = rounds;
  options.search.seed = request.seed;
  return options;
}

}  // namespace memplan::requests
