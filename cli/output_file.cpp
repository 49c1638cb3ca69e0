#include "cli/output_file.hpp"

#include <unistd.h>

#include <filesystem>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "io/trace_io.hpp"

namespace memplan::cli {
namespace {

// A path that write_file_atomically replaces by a rename: a regular file, or none yet (symlinks
// followed). Standard output, FIFOs and devices are written in place.
bool is_regular_target(const std::string& path) {
  if (path == "-") return false;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  return !std::filesystem::exists(status) || std::filesystem::is_regular_file(status);
}

}  // namespace

void check_output(const std::string& path, std::string_view flag) {
  if (path.empty() || path == "-") return;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw sim::InputError(std::string(flag), fmt::format("'{}' is a directory, not a file", path));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    throw sim::InputError(std::string(flag), fmt::format("'{}': the folder '{}' does not exist",
                                                         path, parent.string()));
  }
  const std::string folder = parent.empty() ? std::string(".") : parent.string();
  if (is_regular_target(path) && ::access(folder.c_str(), W_OK) != 0) {
    throw sim::InputError(std::string(flag),
                          fmt::format("'{}': the folder '{}' is not writable", path, folder));
  }
}

void write_outputs(std::initializer_list<std::pair<std::string_view, std::string_view>> outputs) {
  for (const bool regular : {false, true}) {
    for (const auto& [path, text] : outputs) {
      if (!path.empty() && is_regular_target(std::string(path)) == regular) {
        write_output(std::string(path), text);
      }
    }
  }
}

void write_output(const std::string& path, std::string_view text) {
  if (path == "-") {
    fmt::print("{}", text);
    std::fflush(stdout);
    return;
  }
  sim::write_file_atomically(path, text);
}

std::FILE* report_stream(std::initializer_list<std::string_view> outputs) {
  int to_stdout = 0;
  for (std::string_view o : outputs) to_stdout += o == "-" ? 1 : 0;
  if (to_stdout > 1) {
    throw sim::InputError("-", "only one output can be standard output");
  }
  return to_stdout == 1 ? stderr : stdout;
}

}  // namespace memplan::cli
