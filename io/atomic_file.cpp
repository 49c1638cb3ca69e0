#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

// The temporary file beside `target` that a write goes to before it is renamed into place,
// `.NAME.tmp.PID`; removed unless committed.
class TempFile {
 public:
  TempFile(const fs::path& target, const fs::path& path)
      : path_(path),
        temp_(target.parent_path() /
              fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())) {
    fd_ = ::open(temp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) throw InputError(path.string(), "cannot open for writing");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
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
