#pragma once
// Comparison: every policy on the same workload and machine, each plan simulated by the same
// engine — what `memplan compare` prints. A row says whether the policy's plan fits (and if not,
// why), the iteration time, the overhead against an ideal device with unlimited memory, the
// peak, the actions taken and how long the policy took to decide.
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/machine.hpp"
#include "core/program.hpp"
#include "search/bound/lower_bound.hpp"
#include "search/policies/gist.hpp"
#include "search/policies/policy.hpp"
#include "sim/timeline.hpp"

namespace memplan::search {

struct ComparisonRow {
  std::string policy;
  PolicyDecision decision;
  sim::Program program;
  sim::Timeline timeline;
  double overhead = 0.0;  // step / ideal step - 1 (when it fits)
  double decide_s = 0.0;  // wall-clock time the policy took to decide

  /// The step the comparison ranks by, what a training loop sees: its period when the loop repeats
  /// it back to back (Timeline::period_ns; the step alone without a host side).
  [[nodiscard]] sim::Nanoseconds step_ns() const { return timeline.period_ns; }
  /// Share of that step in which the compute stream runs nothing.
  [[nodiscard]] double gpu_idle_share() const;
  /// The host's own time per step (dispatches, launches, tail) exceeds the device's: its compute
  /// stream's busy time and its waits for the plan's copies.
  [[nodiscard]] bool cpu_bound() const;
};

struct Comparison {
  sim::Nanoseconds ideal_ns = 0;    // in-core on a device with unlimited memory: its step
  std::vector<ComparisonRow> rows;  // in policies() order; only the finished ones if cancelled
  /// No plan that fits (any placement, the encodings given) has a shorter step alone
  /// (search/bound/lower_bound.hpp): each row's gap is its iteration time against it. nullopt
  /// when cancelled before it was found.
  std::optional<LowerBound> lower_bound;
  bool cancelled = false;  // ComparisonOptions::cancel stopped it

  /// Indices into rows, best first: plans that fit by their step wall (ties in policies()
  /// order), then those that do not.
  [[nodiscard]] std::vector<std::size_t> ranking() const;
};

struct ComparisonProgress {
  std::string policy;  // the policy that just finished
  std::size_t done = 0;
  std::size_t total = 0;
  double elapsed_s = 0.0;
};

struct ComparisonOptions {
  EncodingOptions encodings;  // applied to every policy's plan
  int threads = 0;            // policies decided at once (0: every core)
  /// Called after every finished policy, from the thread that ran it (one call at a time).
  std::function<void(const ComparisonProgress&)> on_progress;
  /// When set and it becomes true, the policies being decided stop at their next simulation and
  /// no other starts; the result holds the rows that finished and says `cancelled`.
  const std::atomic<bool>* cancel = nullptr;
  /// Whether the lower bound is solved beside the rows (off: a caller that solves its own, as a
  /// job's search does over its space; the rows then have no gap).
  bool lower_bound = true;
};

/// Runs every policy of policies() (with the encodings applied to its plan when any is enabled),
/// in parallel; the rows come in policies() order whatever the number of threads.
Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const ComparisonOptions& options);
/// The same with default options but for the encodings.
Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const EncodingOptions& encodings = {});

/// One policy's row: decide (timed), apply the encodings, lower and simulate on `machine`; the
/// overhead is taken against `ideal_ns` (ideal_step_ns). What compare_policies does for each
/// policy.
/// With a `stop`, throws Stopped (evaluator.hpp) when it is due before the policy has decided.
ComparisonRow run_policy(const Policy& policy, const sim::Workload& workload,
                         const sim::Machine& machine, const NetworkView& view,
                         const EncodingOptions& encodings, sim::Nanoseconds ideal_ns,
                         const Stop* stop = nullptr);

/// The step of the in-core plan on this machine with unlimited device memory: its period when
/// the training loop repeats it back to back (sim::step_period_ns), as plans are ranked.
sim::Nanoseconds ideal_step_ns(const sim::Workload& workload, const sim::Machine& machine);

/// `{"ideal_s": ..., "lower_bound_s": ..., "rows": [...]}`; each row: `policy`, the fields of
/// `memplan simulate --json`, `overhead`, `decide_s`, `note`, `rank` (1 is best, by the step's
/// wall), `wall_s` (the step's wall it is ranked by), `gap` (its iteration time against the lower
/// bound; null when it does not fit), and with a host side `gpu_idle_share` and `cpu_bound`.
nlohmann::json comparison_json(const Comparison& comparison, const sim::Workload& workload,
                               const sim::Machine& machine);
/// One line per policy, in columns, best first (ranking()).
std::string comparison_text(const Comparison& comparison, const sim::Workload& workload,
                            const sim::Machine& machine);
/// Header and one line per policy; the last column, `why_not`, is the out-of-memory line of a
/// row that does not fit (empty when it fits), quoted as CSV requires.
std::string comparison_csv(const Comparison& comparison, const sim::Workload& workload);
/// Why a row's plan does not fit, in one line (empty when it fits): the out-of-memory report, or
/// the policy's own verdict when it gave up.
std::string why_not(const ComparisonRow& row, const sim::Workload& workload);
/// A CSV field as RFC 4180 writes it: quoted, with quotes doubled, when it holds a comma, a quote
/// or a line break.
std::string csv_field(const std::string& text);

}  // namespace memplan::search
