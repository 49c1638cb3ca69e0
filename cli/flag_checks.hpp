#pragma once
// Checks of flag values, run by CLI11 while it parses (before any file is read), so that a bad
// value is one line naming the flag and the range, and exit status 2. Every count, time limit,
// size, bandwidth and duration flag has one: nothing out of range (nan, 1e300, -1, 0 threads,
// 100000 threads, an empty --memory) reaches a command.
#include <cstdint>

#include <CLI/CLI.hpp>

#include "requests/search_request.hpp"

namespace memplan::cli {

/// The ranges the commands share (worker threads, seconds of search, rounds, seeds): the
/// requests' (requests/search_request.hpp), which the Python API meets too.
using requests::kMaxRounds;
using requests::kMaxSeed;
using requests::kMaxThreads;
using requests::kMaxTimeLimitS;

/// Refuses an empty value ('') of every option of `app` and its subcommands that takes one, so
/// that `-o ''`, `--link ''`, `--encode ''` or `--step-annotation ''` is one line and exit 2
/// rather than taken for "not given" (or accepted). Called once all commands are added.
void refuse_empty_values(CLI::App& app);

/// A whole number in [lo, hi] ("--threads 0" is refused with the range).
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
/// Seconds: a finite number in (0, hi].
CLI::Validator seconds_up_to(double hi);
/// A size, bandwidth or duration in the unit grammar of core/units.hpp ("16GiB", "12.5GB/s",
/// "10us"): the same parse the command does later, so its message is the one shown.
CLI::Validator size_value();
/// A device memory budget: a size, or a share of the step's in-core peak ("50%").
CLI::Validator budget_value();
CLI::Validator bandwidth_value();
/// A search's gap to the lower bound: a fraction (0.005) or a percentage ("0.5%").
CLI::Validator gap_value();
CLI::Validator duration_value();

}  // namespace memplan::cli
