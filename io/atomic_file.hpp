#pragma once
// Output files written so that neither a failure nor a second writer leaves a half-written file or
// loses one: write_file_atomically for an output written once (a temporary file beside it, renamed
// into place), GrowingFile for one that grows while a command runs (a sweep's CSV), held under an
// advisory lock from before it is read until the run ends. Both write a symlink through (its
// target is replaced, the link stays), write what is not a regular file (a FIFO, a device)
// directly, as coreutils do, and refuse a directory. Shared by every command that writes an
// output file.
#include <filesystem>
#include <string>
#include <string_view>

namespace memplan::sim {

/// `path` with its symlinks followed (a dangling one to the file it would create): the file a
/// write to `path` replaces. Throws InputError on a loop of links.
std::filesystem::path write_target(std::filesystem::path path);

/// Writes `text` to `path` through a temporary file beside it and a rename, so a failure never
/// leaves a half-written file. Throws InputError when the file cannot be written.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

/// An output file that grows while a command runs, locked (flock, exclusive) by this process from
/// construction to destruction: a second run given the same file is refused in one line instead of
/// replacing it under the first, whose rows would then go to a file nobody sees (Note [Growing
/// file] in atomic_file.cpp).
class GrowingFile {
 public:
  /// Opens `path` (created empty when absent) and locks it. Throws InputError naming `flag` when
  /// another process holds the lock, and naming the file when it cannot be opened.
  GrowingFile(const std::filesystem::path& path, std::string_view flag);
  /// Unlocks; removes the file when this created it and wrote nothing.
  ~GrowingFile();
  GrowingFile(const GrowingFile&) = delete;
  GrowingFile& operator=(const GrowingFile&) = delete;

  /// Whether it is a regular file that existed before (one a run may resume from).
  [[nodiscard]] bool existed() const { return !created_ && !special_; }
  /// What the file holds now (nothing for a FIFO or a device).
  [[nodiscard]] std::string contents() const;
  /// Replaces the contents by `text` atomically (a locked temporary renamed into place).
  void replace(std::string_view text);
  /// Appends `text`. Throws InputError when it cannot be written (disk full).
  void append(std::string_view text);

 private:
  std::filesystem::path path_;    // as given, for messages
  std::filesystem::path target_;  // the links followed
  int fd_ = -1;
  bool created_ = false;   // this created the file and has not replaced it yet
  bool special_ = false;   // a FIFO or a device: written directly, not locked or replaced
  bool writable_ = false;  // fd_ is open for writing: a special file, or since replace()
};

}  // namespace memplan::sim
