#pragma once
// Runs the memplan binary as a user would and captures what it prints, for tests of the CLI.
#include <filesystem>
#include <string>

namespace memplan::test {

struct CommandResult {
  int exit_status = -1;
  std::string out;
  std::string err;
};

/// Whether this build (the memplan binary's and the tests') is sanitized: a sanitizer reserves
/// terabytes of address space for its shadow memory, so a run under `ulimit -v` cannot start.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

/// Runs `memplan ARGS` through /bin/sh (ARGS is shell text) and captures stdout and stderr;
/// `launcher` (shell text, e.g. "mpirun -np 2") goes before memplan's path when given.
CommandResult run_memplan(const std::string& args, const std::string& launcher = "");

/// Path of a file shipped in the source tree, e.g. source_path("traces/mlp4.json").
std::string source_path(const std::string& relative);

/// The same path quoted for run_memplan's shell text, e.g. for an argument.
std::string quoted_source_path(const std::string& relative);
/// quoted_source_path of the shipped traces/resnet_tiny.json, the trace most command tests run.
std::string tiny_trace();

/// A file's whole contents ("" when it cannot be read).
std::string read_text(const std::filesystem::path& path);

/// A fresh empty directory under the system temp dir, unique to this test process.
std::string temp_dir();

}  // namespace memplan::test
