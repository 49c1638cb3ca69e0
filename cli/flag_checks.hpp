#pragma once
// Checks of flag values, run by CLI11 while it parses (before any file is read), so that a bad
// value is one line naming the flag and the range, and exit status 2. Every count, time limit,
// size, bandwidth and duration flag has one: nothing out of range (nan, 1e300, -1, 0 threads,
// 100000 threads, an empty --memory) reaches a command.
#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

namespace memplan::cli {

/// The ranges the commands share: worker threads, seconds of search, rounds, seeds.
inline constexpr std::int64_t kMaxThreads = 1024;
inline constexpr double kMaxTimeLimitS = 7 * 86'400.0;  // a week
inline constexpr std::int64_t kMaxRounds = 1'000'000'000;
inline constexpr std::int64_t kMaxSeed = std::numeric_limits<std::int64_t>::max();

/// A whole number in [lo, hi] ("--threads 0" is refused with the range).
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
/// Seconds: a finite number in (0, hi].
CLI::Validator seconds_up_to(double hi);
/// A size, bandwidth or duration in the unit grammar of sim/units.hpp ("16GiB", "12.5GB/s",
/// "10us"): the same parse the command does later, so its message is the one shown.
CLI::Validator size_value();
CLI::Validator bandwidth_value();
CLI::Validator duration_value();

}  // namespace memplan::cli
