#pragma once
// Runs the memplan binary as a user would and captures what it prints, for tests of the CLI.
#include <string>

namespace memplan::test {

struct CommandResult {
  int exit_status = -1;
  std::string out;
  std::string err;
};

/// Runs `memplan ARGS` through /bin/sh (ARGS is shell text) and captures stdout and stderr;
/// `launcher` (shell text, e.g. "mpirun -np 2") goes before memplan's path when given.
CommandResult run_memplan(const std::string& args, const std::string& launcher = "");

/// Path of a file shipped in the source tree, e.g. source_path("traces/mlp4.json").
std::string source_path(const std::string& relative);

/// A fresh empty directory under the system temp dir, unique to this test process.
std::string temp_dir();

}  // namespace memplan::test
