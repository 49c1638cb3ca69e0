#pragma once
// Comparison: every policy on the same workload and machine, each plan simulated by the same
// engine — what `memplan compare` prints. A row says whether the policy's plan fits (and if not,
// why), the iteration time, the overhead against an ideal device with unlimited memory, the
// peak, the actions taken and how long the policy took to decide.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/gist.hpp"
#include "search/policy.hpp"
#include "sim/machine.hpp"
#include "sim/program.hpp"
#include "sim/timeline.hpp"

namespace memplan::search {

struct ComparisonRow {
  std::string policy;
  PolicyDecision decision;
  sim::Program program;
  sim::Timeline timeline;
  double overhead = 0.0;  // iteration time / ideal iteration time - 1 (when it fits)
  double decide_s = 0.0;  // wall-clock time the policy took to decide
};

struct Comparison {
  sim::Nanoseconds ideal_ns = 0;    // in-core on a device with unlimited memory
  std::vector<ComparisonRow> rows;  // in policies() order; only the finished ones if cancelled
  bool cancelled = false;           // ComparisonOptions::cancel stopped it
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
};

/// Runs every policy of policies() (with the encodings applied to its plan when any is enabled),
/// in parallel; the rows come in policies() order whatever the number of threads.
Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const ComparisonOptions& options);
/// The same with default options but for the encodings.
Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const EncodingOptions& encodings = {});

/// One policy's row: decide (timed), apply the encodings, lower and simulate on `machine`; the
/// overhead is taken against `ideal_ns`. What compare_policies does for each policy.
/// With a `stop`, throws Stopped (evaluator.hpp) when it is due before the policy has decided.
ComparisonRow run_policy(const Policy& policy, const sim::Workload& workload,
                         const sim::Machine& machine, const NetworkView& view,
                         const EncodingOptions& encodings, sim::Nanoseconds ideal_ns,
                         const Stop* stop = nullptr);

/// The iteration time of the in-core plan on this machine with unlimited device memory.
sim::Nanoseconds ideal_iteration_ns(const sim::Workload& workload, const sim::Machine& machine);

/// `{"ideal_s": ..., "rows": [...]}`; each row: `policy`, the fields of `memplan simulate --json`,
/// `overhead`, `decide_s`, `note`.
nlohmann::json comparison_json(const Comparison& comparison, const sim::Workload& workload,
                               const sim::Machine& machine);
/// One line per policy, in columns.
std::string comparison_text(const Comparison& comparison, const sim::Workload& workload,
                            const sim::Machine& machine);
/// Header and one line per policy; the last column, `why_not`, is the out-of-memory line of a
/// row that does not fit (empty when it fits), quoted as CSV requires.
std::string comparison_csv(const Comparison& comparison, const sim::Workload& workload);
/// Why a row's plan does not fit, in one line (empty when it fits): the out-of-memory report, or
/// the policy's own verdict when it gave up.
std::string why_not(const ComparisonRow& row, const sim::Workload& workload);

}  // namespace memplan::search
