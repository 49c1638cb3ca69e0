#include "tests/support/run_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace memplan::test {

std::string source_path(const std::string& relative) {
  return std::string(MEMPLAN_SOURCE_DIR) + "/" + relative;
}

std::string temp_dir() {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("memplan-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

CommandResult run_memplan(const std::string& args, const std::string& launcher) {
  const std::string dir = temp_dir();
  const std::string out_path = dir + "/stdout";
  const std::string err_path = dir + "/stderr";
  const std::string command = launcher + (launcher.empty() ? "'" : " '") + MEMPLAN_BINARY + "' " +
                              args + " >'" + out_path + "' 2>'" + err_path + "' </dev/null";
  const int status = std::system(command.c_str());
  if (status == -1) throw std::runtime_error("could not run: " + command);
  CommandResult result;
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  std::filesystem::remove_all(dir);
  return result;
}

std::string tiny_trace() {
  return quoted_source_path("traces/resnet_tiny.json");
}

std::string quoted_source_path(const std::string& relative) {
  return fmt::format("'{}'", source_path(relative));  // fmt: GCC 12 -Wrestrict on "'" + s
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace memplan::test
