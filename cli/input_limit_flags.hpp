#pragma once
// --max-input-size and --max-input-values: the input limits (io/input_stream.hpp) of one run,
// on every command that reads a file and before any command's name (`memplan --max-input-size
// 8GiB import kineto big.json`). Each sets the process's limit as it is parsed, before the
// command runs.
#include <CLI/CLI.hpp>

namespace memplan::cli {

/// Adds the two flags to `command` (or to the whole app, before a command's name).
void add_input_limit_flags(CLI::App& command);

}  // namespace memplan::cli
