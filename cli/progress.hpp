#pragma once
// Progress of a long command on standard error, so that its report on standard output stays
// clean: a bar redrawn in place when standard error is a terminal, a plain line every few seconds
// when it is not (a log, CI; MEMPLAN_PROGRESS_SECONDS sets how many, default 5), nothing with
// --quiet or --json. A run shorter than that interval prints no line, so a quick failure is still
// one line on stderr. Commands feed it from the libraries' progress callbacks
// (search::SearchOptions::on_progress, search::SweepOptions::on_progress) with one line:
//   options.on_progress = [&](const auto& p) { progress.update(p.done, p.total, detail); };
// and announce a wait without a count (a backend run) with stage(). Thread-safe.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <CLI/CLI.hpp>

namespace memplan::cli {

class Progress {
 public:
  enum class Mode { kOff, kBar, kLines };

  /// kOff with --quiet or --json, kBar when standard error is a terminal, kLines otherwise.
  static Mode mode_for(bool quiet, bool json);

  /// `label` starts every line ("search", "sweep"). In kLines mode a line is printed at most every
  /// `line_interval_s` (negative: MEMPLAN_PROGRESS_SECONDS or 5; 0: at every update).
  Progress(std::string label, Mode mode, double line_interval_s = -1);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `done` of `total` units (total 0: unknown), with a short `detail` ("best 12.3 ms").
  void update(std::size_t done, std::size_t total, std::string_view detail = {});
  /// A wait without a count ("running the plan on host"): shown with its elapsed time, on a
  /// terminal at once and redrawn every second, otherwise a line every interval while it lasts.
  void stage(std::string_view what);
  /// Ends the display (a newline after a bar); later updates are ignored. Also the destructor's.
  void finish();

 private:
  [[nodiscard]] double elapsed_s() const;
  void print_stage_locked();
  void tick();

  std::string label_;
  Mode mode_;
  double line_interval_s_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = -1;
  bool bar_drawn_ = false;
  bool finished_ = false;
  std::string stage_;
  std::chrono::steady_clock::time_point stage_start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

/// Adds `-q,--quiet` ("no progress on standard error") to `command`.
void add_quiet_flag(CLI::App& command, bool& quiet);

}  // namespace memplan::cli
