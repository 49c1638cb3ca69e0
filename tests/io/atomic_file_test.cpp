// io/atomic_file.hpp: a write stopped by a signal leaves no temporary beside its file (#40 item
// 9: hidden `.NAME.tmp.PID` files were left after Ctrl-C), and still ends by that signal.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "io/atomic_file.hpp"
#include "tests/support/run_command.hpp"

namespace {

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// In a child process: writes 64 MiB to dir/out.txt while a thread sends `sig` to the process as
// soon as the temporary appears. Returns the child's wait status.
int write_interrupted(const std::string& dir, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::thread([dir, sig] {
      for (;;) {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
          if (e.path().filename().string().rfind(".out.txt.tmp.", 0) == 0) {
            ::kill(::getpid(), sig);
            return;
          }
        }
      }
    }).detach();
    try {
      memplan::sim::write_file_atomically(dir + "/out.txt", std::string(64 << 20, 'x'));
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("a write stopped by SIGINT or SIGTERM leaves no temporary and dies of the signal",
          "[io][atomic_file]") {
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    const std::string dir = memplan::test::temp_dir();
    bool stopped = false;
    for (int attempt = 0; attempt < 20 && !stopped; ++attempt) {
      const int status = write_interrupted(dir, sig);
      if (WIFSIGNALED(status)) {
        stopped = true;
        CHECK(WTERMSIG(status) == sig);
        CHECK(entries(dir) == 0);  // neither the temporary nor a half-written file
      } else {
        std::filesystem::remove(dir + "/out.txt");  // the write won the race: again
      }
    }
    CHECK(stopped);
  }
}

TEST_CASE("an ignored SIGINT stays ignored while a file is written", "[io][atomic_file]") {
  const std::string dir = memplan::test::temp_dir();
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  REQUIRE(::sigaction(SIGINT, &ignore, &before) == 0);
  const int status = write_interrupted(dir, SIGINT);
  ::sigaction(SIGINT, &before, nullptr);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::filesystem::file_size(dir + "/out.txt") == std::uintmax_t{64} << 20);
  CHECK(entries(dir) == 1);
}
