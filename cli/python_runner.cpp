#include "cli/python_runner.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "core/input_error.hpp"

namespace memplan::cli {

namespace fs = std::filesystem;

namespace {
// The path of the running memplan binary: the Python package is looked for beside it.
std::string memplan_binary() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}
}  // namespace

fs::path find_python_package(const std::string& command) {
  if (const char* env = std::getenv("MEMPLAN_PYTHONPATH"); env != nullptr && *env != '\0') {
    return env;
  }
  // The package the build lays out beside the binary (build/PRESET/python, with its extension),
  // or the one `cmake --install` put under the same prefix (lib/pythonX.Y/dist-packages).
  std::error_code ec;
  const fs::path bin = fs::path(memplan_binary()).parent_path();
  std::vector<fs::path> candidates{bin / "../python"};
  for (const auto& entry : fs::directory_iterator(bin / "../lib", ec)) {
    if (entry.path().filename().string().starts_with("python3")) {
      candidates.push_back(entry.path() / "dist-packages");
    }
  }
  for (const fs::path& candidate : candidates) {
    if (fs::exists(candidate / "memplan/torch/__main__.py", ec))
      return fs::weakly_canonical(candidate);
  }
  throw sim::InputError(command,
                        fmt::format("cannot find the memplan Python package beside {} (set "
                                    "MEMPLAN_PYTHONPATH to the folder holding memplan/)",
                                    bin.string()));
}

int run_memplan_torch(const std::string& command, const std::vector<std::string>& args) {
  const fs::path package = find_python_package(command);
  const char* python_env = std::getenv("MEMPLAN_PYTHON");
  std::vector<std::string> argv{
      python_env != nullptr && *python_env != '\0' ? python_env : "/usr/bin/python3", "-m",
      "memplan.torch"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string path = package.string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    path += ":";
    path += old;
  }
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (const std::string& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw sim::InputError(command, fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // The child ends with this process: a memplan killed (SIGTERM, SIGKILL) must not leave a
    // Python process behind that writes -o after the command failed. SIGTERM is Python's end
    // without a word (no handler of its own), and the C++ writer removes its temporary on it.
    // Asked before the check, so a parent gone in between is seen either way.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(3);
    ::setenv("PYTHONPATH", path.c_str(), 1);
    ::execv(raw[0], raw.data());
    fmt::print(stderr, "memplan: {}: cannot run {}: {}\n", command, argv[0], std::strerror(errno));
    ::_exit(2);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fmt::print(stderr, "memplan: {}: {} was killed by signal {}\n", command, argv[0],
             WTERMSIG(status));
  return 3;
}

}  // namespace memplan::cli
