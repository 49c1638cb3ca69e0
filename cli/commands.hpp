#pragma once
// Each `memplan` subcommand registers itself on the application here. A command parses its
// flags, calls the libraries and prints; it holds no logic of its own.
#include <CLI/CLI.hpp>

namespace memplan::cli {

void add_info_command(CLI::App& app);
void add_zoo_command(CLI::App& app);
void add_import_command(CLI::App& app);

}  // namespace memplan::cli
