#pragma once
// --max-input-size and --max-input-values: the input limits (io/input_stream.hpp) of one run,
// taken before the command's name (`memplan --max-input-size 8GiB import kineto big.json`) or
// among its flags, and set before any command reads a file.
#include <CLI/CLI.hpp>

namespace memplan::cli {

/// Adds the two flags to `app` and to every command without subcommands of its own. Called once
/// all commands are added.
void add_input_limit_flags(CLI::App& app);

}  // namespace memplan::cli
