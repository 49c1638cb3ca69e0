#pragma once
// Running memplan's Python package (python/memplan) from the CLI, for the commands whose work is
// PyTorch's: `memplan capture` and `memplan validate --backend torch`.
#include <filesystem>
#include <string>
#include <vector>

namespace memplan::cli {

/// The folder holding the `memplan` Python package: $MEMPLAN_PYTHONPATH, else the source tree's
/// python/ above a build tree's bin/ (build/PRESET/bin), else an install's share/memplan/python.
/// Throws sim::InputError naming `command` when there is none.
std::filesystem::path find_python_package(const std::string& command);

/// Runs `$MEMPLAN_PYTHON` (default /usr/bin/python3) `-m memplan.torch ARGS` with PYTHONPATH
/// starting at the package; returns its exit status (3 when it was killed by a signal). The child
/// is ended (SIGTERM) when this process ends first, so it never writes after memplan failed.
int run_memplan_torch(const std::string& command, const std::vector<std::string>& args);

}  // namespace memplan::cli
