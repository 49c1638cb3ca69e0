#pragma once
// Progress of a long command on standard error, so that its report on standard output stays
// clean: a bar redrawn in place when standard error is a terminal, a plain line every few seconds
// when it is not (a log, CI), nothing with --quiet or --json. Commands feed it from the progress
// callbacks of the libraries (search::SearchOptions::on_progress, search::SweepOptions::
// on_progress): `options.on_progress = [&](const auto& p) { progress.update(p.done, p.total,
// detail); };`. update() may be called from any thread.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace memplan::cli {

class Progress {
 public:
  enum class Mode { kOff, kBar, kLines };

  /// kOff with --quiet or --json, kBar when standard error is a terminal, kLines otherwise.
  static Mode mode_for(bool quiet, bool json);

  /// `label` starts every line ("search", "sweep"). In kLines mode a line is printed at most every
  /// `line_interval_s` (0: at every update).
  Progress(std::string label, Mode mode, double line_interval_s = 5.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `done` of `total` units (total 0: unknown), with a short `detail` ("best 12.3 ms").
  void update(std::size_t done, std::size_t total, std::string_view detail = {});
  /// A step of a command without a count ("running the plan on host"): always one line (unless
  /// off), so that a user knows what the wait is for.
  void stage(std::string_view what);
  /// Ends the bar with a newline (done by the destructor too); later updates are ignored.
  void finish();

  [[nodiscard]] Mode mode() const { return mode_; }

 private:
  [[nodiscard]] double elapsed_s() const;

  std::string label_;
  Mode mode_;
  double line_interval_s_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = -1;
  bool bar_drawn_ = false;
  bool finished_ = false;
  std::mutex mutex_;
};

/// Adds `--quiet` ("no progress on standard error") to `command`.
void add_quiet_flag(CLI::App& command, bool& quiet);

}  // namespace memplan::cli
