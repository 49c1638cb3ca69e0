#include "io/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "io/atomic_file.hpp"

namespace memplan::sim {
namespace {

// A path that write_file_atomically replaces by a rename: a regular file, or none yet (symlinks
// followed). Standard output, FIFOs and devices are written in place.
bool is_regular_target(const std::string& path) {
  if (path == "-") return false;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  return !std::filesystem::exists(status) || std::filesystem::is_regular_file(status);
}

// What a path names on disk, to tell whether two paths are one file.
struct FileIdentity {
  bool exists = false;
  bool special = false;  // an existing FIFO or device
  dev_t device = 0;
  ino_t inode = 0;
  std::filesystem::path path;  // absent: the absolute, normal path of the file a write creates

  friend bool operator==(const FileIdentity& a, const FileIdentity& b) {
    if (a.exists != b.exists) return false;
    return a.exists ? a.device == b.device && a.inode == b.inode : a.path == b.path;
  }
};

FileIdentity identity(std::string_view text) {
  FileIdentity id;
  const std::filesystem::path target = write_target(std::string(text));
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    id.exists = true;
    id.special = !S_ISREG(st.st_mode);
    id.device = st.st_dev;
    id.inode = st.st_ino;
    return id;
  }
  std::error_code ec;
  id.path = std::filesystem::weakly_canonical(std::filesystem::absolute(target, ec), ec);
  return id;
}

// Refuses `output` when it is one of the existing files of `inputs`.
void check_not_input(const OutputFile& output, const FileIdentity& id,
                     const std::vector<InputFile>& inputs) {
  for (const InputFile& input : inputs) {
    if (input.path.empty() || input.path == "-") continue;
    const FileIdentity in = identity(input.path);
    if (!in.exists || !(in == id)) continue;
    throw InputError(
        std::string(output.flag),
        fmt::format("'{}' is the {} this command reads{}: write {} to another file", output.path,
                    input.name,
                    input.path == output.path ? std::string() : fmt::format(" ('{}')", input.path),
                    output.flag));
  }
}

}  // namespace

void check_outputs(const std::vector<OutputFile>& outputs, const std::vector<InputFile>& inputs) {
  std::vector<std::pair<OutputFile, FileIdentity>> seen;
  for (const OutputFile& output : outputs) {
    if (output.path.empty() || output.path == "-") continue;
    check_output(std::string(output.path), output.flag);
    FileIdentity id = identity(output.path);
    if (id.special) continue;
    check_not_input(output, id, inputs);
    for (const auto& [other, other_id] : seen) {
      if (!(other_id == id)) continue;
      throw InputError(std::string(output.flag),
                       fmt::format("'{}' is the file {} writes{}: give each output its own file",
                                   output.path, other.flag,
                                   other.path == output.path ? std::string()
                                                             : fmt::format(" ('{}')", other.path)));
    }
    seen.emplace_back(output, std::move(id));
  }
}

void check_output(const std::string& path, std::string_view flag) {
  if (path.empty() || path == "-") return;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(std::string(flag), fmt::format("'{}' is a directory, not a file", path));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    throw InputError(std::string(flag),
                     fmt::format("'{}': the folder '{}' does not exist", path, parent.string()));
  }
  const std::string folder = parent.empty() ? std::string(".") : parent.string();
  if (is_regular_target(path) && ::access(folder.c_str(), W_OK) != 0) {
    throw InputError(std::string(flag),
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
  write_file_atomically(path, text);
}

std::FILE* report_stream(std::initializer_list<std::string_view> outputs) {
  int to_stdout = 0;
  for (std::string_view o : outputs) to_stdout += o == "-" ? 1 : 0;
  if (to_stdout > 1) {
    throw InputError("-", "only one output can be standard output");
  }
  return to_stdout == 1 ? stderr : stdout;
}

}  // namespace memplan::sim
