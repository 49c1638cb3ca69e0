#pragma once
// Each `memplan` subcommand registers itself on the application here. A command parses its
// flags, calls the libraries and prints; it holds no logic of its own.
#include <CLI/CLI.hpp>

namespace memplan::cli {

void add_info_command(CLI::App& app);
/// Sets `exit_status` to 1 when the simulated plan does not fit.
void add_simulate_command(CLI::App& app, int& exit_status);
void add_compare_command(CLI::App& app);
/// Sets `exit_status` to 1 when no plan that fits was found.
void add_search_command(CLI::App& app, int& exit_status);
/// Traces x memories x links x (policies and the search), one CSV row per cell.
void add_sweep_command(CLI::App& app);
void add_zoo_command(CLI::App& app);
void add_import_command(CLI::App& app);
/// `import snapshot` under the `import` command (cli/import_snapshot_command.cpp).
void add_import_snapshot_command(CLI::App& import);
/// Sets `exit_status` to 1 when the plan does not fit or gradients differ from the in-core run.
void add_validate_command(CLI::App& app, int& exit_status);
void add_record_command(CLI::App& app);
/// Runs python/memplan/torch's capture; sets `exit_status` to its exit status.
void add_capture_command(CLI::App& app, int& exit_status);

}  // namespace memplan::cli
