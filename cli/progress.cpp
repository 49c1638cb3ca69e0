#include "cli/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/core.h>

namespace memplan::cli {
namespace {
constexpr double kBarRedrawS = 0.1;  // a terminal bar is redrawn at most ten times a second
constexpr std::size_t kBarWidth = 30;
constexpr double kDefaultLineIntervalS = 5.0;

double interval_from_environment() {
  if (const char* text = std::getenv("MEMPLAN_PROGRESS_SECONDS")) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (end != text && *end == '\0' && value >= 0 && value <= 3600) return value;
  }
  return kDefaultLineIntervalS;
}
}  // namespace

Progress::Mode Progress::mode_for(bool quiet, bool json) {
  if (quiet || json) return Mode::kOff;
  return ::isatty(STDERR_FILENO) != 0 ? Mode::kBar : Mode::kLines;
}

Progress::Progress(std::string label, Mode mode, double line_interval_s)
    : label_(std::move(label)),
      mode_(mode),
      line_interval_s_(line_interval_s < 0 ? interval_from_environment() : line_interval_s),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  finish();
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(std::size_t done, std::size_t total, std::string_view detail) {
  const std::lock_guard lock(mutex_);
  if (mode_ == Mode::kOff || finished_) return;
  const double now = elapsed_s();
  if (mode_ == Mode::kLines) {
    // A line every interval from the start: a quick run prints none.
    if (now - std::max(last_print_s_, 0.0) < line_interval_s_) return;
  } else if (last_print_s_ >= 0 && now - last_print_s_ < kBarRedrawS && done < total) {
    return;
  }
  last_print_s_ = now;
  const std::string count = total > 0 ? fmt::format("{}/{}", done, total) : std::to_string(done);
  if (mode_ == Mode::kLines) {
    fmt::print(stderr, "{}: {} {}{}({:.0f} s)\n", label_, count, detail, detail.empty() ? "" : " ",
               now);
    return;
  }
  std::string bar;
  if (total > 0) {
    const std::size_t filled = std::min(kBarWidth, done * kBarWidth / total);
    bar = fmt::format("[{}{}] ", std::string(filled, '#'), std::string(kBarWidth - filled, '.'));
  }
  fmt::print(stderr, "\r\033[K{}: {}{} {}  {:.0f} s", label_, bar, count, detail, now);
  std::fflush(stderr);
  bar_drawn_ = true;
}

void Progress::print_stage_locked() {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
  if (mode_ == Mode::kBar) {
    fmt::print(stderr, "\r\033[K{}: {}  {:.0f} s", label_, stage_, seconds);
    std::fflush(stderr);
    bar_drawn_ = true;
  } else {
    fmt::print(stderr, "{}: {} ({:.0f} s)\n", label_, stage_, seconds);
  }
}

void Progress::tick() {
  std::unique_lock lock(mutex_);
  const double interval = mode_ == Mode::kBar ? 1.0 : std::max(line_interval_s_, 0.05);
  while (!finished_) {
    wake_.wait_for(lock, std::chrono::duration<double>(interval));
    if (!finished_) print_stage_locked();
  }
}

void Progress::stage(std::string_view what) {
  const std::lock_guard lock(mutex_);
  if (mode_ == Mode::kOff || finished_) return;
  stage_ = std::string(what);
  stage_start_ = std::chrono::steady_clock::now();
  if (mode_ == Mode::kBar) print_stage_locked();
  if (!ticker_.joinable()) ticker_ = std::thread([this] { tick(); });
}

void Progress::finish() {
  {
    const std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    if (bar_drawn_) fmt::print(stderr, "\n");
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void add_quiet_flag(CLI::App& command, bool& quiet) {
  command.add_flag("-q,--quiet", quiet, "no progress on standard error");
}

}  // namespace memplan::cli
