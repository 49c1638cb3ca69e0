#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>

#include <fmt/core.h>

#include "core/check.hpp"
#include "core/input_error.hpp"

namespace memplan::sim {
namespace {

namespace fs = std::filesystem;

// Writes all of `text` to `fd`, again where a signal interrupted it.
void write_all(int fd, std::string_view text, const fs::path& path, std::string_view failed) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw InputError(path.string(), fmt::format("{}: {}", failed, std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
}

// Opens what is not a regular file (a FIFO, /dev/null, a terminal) to write straight into, as
// `cat >` would: there is nothing to replace atomically. A FIFO nobody reads is refused, not
// waited on.
int open_special(const fs::path& target, const fs::path& path) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(path.string(),
                     fmt::format("cannot open for writing: {}{}", std::strerror(errno),
                                 errno == ENXIO ? " (a FIFO nobody reads)" : ""));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Note [Temporaries on a signal]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run stopped by Ctrl-C (SIGINT), kill (SIGTERM) or a closed terminal (SIGHUP) while it wrote
// an output left its temporary `.NAME.tmp.PID` beside the file. While a temporary exists, a
// handler of those signals is installed that removes every temporary of the process (unlink is
// async-signal-safe), puts back the disposition it found and raises the signal again, so that the
// run still ends as that signal ends it (its exit status says so; an embedding Python process
// gets its KeyboardInterrupt). A signal that was ignored (SIGINT of a background job) is left
// ignored. The paths live in fixed slots the handler reads without allocating.
constexpr std::array<int, 3> kCleanupSignals{SIGINT, SIGTERM, SIGHUP};
constexpr std::size_t kTempSlots = 16;
constexpr std::size_t kTempPathBytes = 4096;
enum : int { kSlotFree, kSlotWriting, kSlotReady };

struct TempSlot {
  std::atomic<int> state{kSlotFree};
  std::array<char, kTempPathBytes> path{};
};
std::array<TempSlot, kTempSlots> g_temp_slots;
std::array<struct sigaction, kCleanupSignals.size()> g_previous_actions{};
std::array<std::atomic<bool>, kCleanupSignals.size()> g_handler_installed{};
std::mutex g_temp_mutex;  // registration and (un)installing, never taken by the handler
int g_temp_count = 0;

void remove_temporaries(int signal) {
  const int saved_errno = errno;
  for (TempSlot& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == kSlotReady) ::unlink(slot.path.data());
  }
  for (std::size_t i = 0; i < kCleanupSignals.size(); ++i) {
    if (kCleanupSignals[i] == signal && g_handler_installed[i].exchange(false)) {
      ::sigaction(signal, &g_previous_actions[i], nullptr);
    }
  }
  errno = saved_errno;
  ::raise(signal);  // delivered once this handler returns, to the disposition put back
}

// With g_temp_mutex held: the handler installed for each signal not ignored, or the previous
// dispositions put back.
void set_cleanup_handler(bool install) {
  for (std::size_t i = 0; i < kCleanupSignals.size(); ++i) {
    if (install) {
      struct sigaction action {};
      action.sa_handler = remove_temporaries;
      ::sigemptyset(&action.sa_mask);
      struct sigaction previous {};
      if (::sigaction(kCleanupSignals[i], nullptr, &previous) != 0) continue;
      if (previous.sa_handler == SIG_IGN) continue;
      g_previous_actions[i] = previous;
      g_handler_installed[i].store(true);
      ::sigaction(kCleanupSignals[i], &action, nullptr);
    } else if (g_handler_installed[i].exchange(false)) {
      ::sigaction(kCleanupSignals[i], &g_previous_actions[i], nullptr);
    }
  }
}

// Registers `path` for removal on a signal; the slot, or -1 when every slot is taken (that
// temporary is then not removed on a signal) or the path is too long for one.
int register_temporary(const fs::path& path) {
  const std::string& text = path.native();
  if (text.size() >= kTempPathBytes) return -1;
  const std::lock_guard<std::mutex> lock(g_temp_mutex);
  for (std::size_t s = 0; s < kTempSlots; ++s) {
    TempSlot& slot = g_temp_slots[s];
    if (slot.state.load() != kSlotFree) continue;
    slot.state.store(kSlotWriting);
    std::memcpy(slot.path.data(), text.c_str(), text.size() + 1);
    slot.state.store(kSlotReady, std::memory_order_release);
    if (g_temp_count++ == 0) set_cleanup_handler(true);
    return static_cast<int>(s);
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  const std::lock_guard<std::mutex> lock(g_temp_mutex);
  g_temp_slots[static_cast<std::size_t>(slot)].state.store(kSlotFree, std::memory_order_release);
  if (--g_temp_count == 0) set_cleanup_handler(false);
}

// The temporary file beside `target` that a write goes to before it is renamed into place,
// `.NAME.tmp.PID`; removed unless committed, also when a signal stops the run (Note
// [Temporaries on a signal]).
class TempFile {
 public:
  TempFile(const fs::path& target, const fs::path& path)
      : path_(path),
        temp_(target.parent_path() /
              fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())),
        slot_(register_temporary(temp_)) {
    fd_ = ::open(temp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      unregister_temporary(slot_);
      throw InputError(path.string(), "cannot open for writing");
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
      ::unlink(temp_.c_str());
      unregister_temporary(slot_);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  [[nodiscard]] int fd() const { return fd_; }

  void write(std::string_view text) const {
    write_all(fd_, text, path_, "write failed (disk full?)");
  }

  // Renames the temporary to `target`.
  void commit(const fs::path& target) {
    std::error_code ec;
    fs::rename(temp_, target, ec);
    if (ec) throw InputError(path_.string(), fmt::format("cannot write: {}", ec.message()));
    committed_ = true;
    unregister_temporary(slot_);  // the path is gone: a signal now has nothing to remove
  }

  // The descriptor, left open for the caller (after commit: the file's).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  fs::path path_;  // as the user gave it, for messages
  fs::path temp_;
  int slot_ = -1;  // in g_temp_slots, -1 when not registered
  int fd_ = -1;
  bool committed_ = false;
};

bool same_file(int fd, const fs::path& path) {
  struct stat held {};
  struct stat named {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// Note [Growing file]
// ~~~~~~~~~~~~~~~~~~~
// A sweep writes its CSV's header (with the rows it resumes) by replacing the file, then appends
// rows as cells finish. Two runs given one file each replaced it, and the first run's later rows
// went to the file the second had unlinked: lost, with both runs exiting 0. So the file is held
// under an exclusive flock from before --resume reads it until the run ends, and a second run is
// refused at once. A lock belongs to a file (an inode), which replace() changes: the temporary is
// locked before it is renamed into place and the old file let go only then, and a run that got
// the lock checks that the path still names the file it locked (else that file was just
// replaced, and it tries again). So the file the path names is always locked by the run writing
// it. The lock is advisory: it keeps memplan runs apart, not other programs.
int open_locked(const fs::path& target, const fs::path& path, std::string_view flag,
                bool& created) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    created = true;
    int fd = ::open(target.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;  // removed since: try again
    }
    if (fd < 0) {
      throw InputError(path.string(),
                       fmt::format("cannot open for writing: {}", std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(fd);
      if (created) ::unlink(target.c_str());
      if (error == EWOULDBLOCK) {
        throw InputError(std::string(flag),
                         fmt::format("'{}' is being written by another memplan run (it holds the "
                                     "file's lock): let that run finish, or write another file",
                                     path.string()));
      }
      throw InputError(path.string(), fmt::format("cannot lock: {}", std::strerror(error)));
    }
    if (same_file(fd, target)) return fd;
    ::close(fd);
  }
  throw InputError(path.string(), "cannot lock: the file keeps being replaced");
}

}  // namespace

fs::path write_target(fs::path path) {
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
    const fs::path target = fs::read_symlink(path, ec);
    if (ec) throw InputError(path.string(), fmt::format("cannot read the link: {}", ec.message()));
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  throw InputError(path.string(), "too many levels of symbolic links");
}

void write_file_atomically(const fs::path& path, std::string_view text) {
  const fs::path target = write_target(path);
  std::error_code ec;
  const auto status = fs::status(target, ec);
  if (fs::is_directory(status)) throw InputError(path.string(), "is a directory, not a file");
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    const int fd = open_special(target, path);
    try {
      write_all(fd, text, path, "write failed");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  TempFile temp(target, path);
  temp.write(text);
  temp.commit(target);
}

GrowingFile::GrowingFile(const fs::path& path, std::string_view flag)
    : path_(path), target_(write_target(path)) {
  std::error_code ec;
  const auto status = fs::status(target_, ec);
  if (fs::is_directory(status)) throw InputError(path.string(), "is a directory, not a file");
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    fd_ = open_special(target_, path_);
    special_ = writable_ = true;
    return;
  }
  fd_ = open_locked(target_, path_, flag, created_);
}

GrowingFile::~GrowingFile() {
  if (created_) ::unlink(target_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

std::string GrowingFile::contents() const {
  std::string text;
  if (special_) return text;
  char buffer[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw InputError(path_.string(), fmt::format("read failed: {}", std::strerror(errno)));
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    at += n;
  }
}

void GrowingFile::replace(std::string_view text) {
  if (special_) {
    write_all(fd_, text, path_, "write failed");
    return;
  }
  TempFile temp(target_, path_);
  if (::flock(temp.fd(), LOCK_EX | LOCK_NB) != 0) {
    throw InputError(path_.string(), fmt::format("cannot lock: {}", std::strerror(errno)));
  }
  temp.write(text);
  temp.commit(target_);  // the path names the locked temporary now
  ::close(fd_);          // and lets go of the file it replaced
  fd_ = temp.release();
  created_ = false;
  writable_ = true;
}

void GrowingFile::append(std::string_view text) {
  MEMPLAN_CHECK(writable_, "a growing file is replaced before it is appended to");
  write_all(fd_, text, path_, "write failed (disk full?)");
}

}  // namespace memplan::sim
