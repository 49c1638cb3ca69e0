#pragma once
// Seeding of the plan search (Note [Plan search] in plan_search.cpp, seeding): every policy
// decides, cheapest first and in parallel, under the seeding share of the time limit; their plans,
// simulated and ranked, are where the local search starts. With the progress reports the seeding
// and the rounds share. Internal to the search engine (search/engine/).
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/network_view.hpp"

namespace memplan::search::engine {

// A deadline `seconds` after `start`, or none when that is too far to represent.
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point start,
                                                     double seconds);

// Reports progress one call at a time (seeding policies finish on worker threads).
class Reporter {
 public:
  Reporter(const SearchOptions& options, std::chrono::steady_clock::time_point start)
      : options_(options), start_(start) {}
  void operator()(std::string stage, std::string policy, std::size_t round, std::size_t evaluated,
                  const Evaluation& best);

 private:
  const SearchOptions& options_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
};

struct Seed {
  sim::Plan plan;
  Evaluation evaluation;
  std::string policy;
};

// Whether `x` ranks before `y` (better() of their evaluations): the order local searches start in.
inline bool ranks_before(const Seed& x, const Seed& y) {
  return better(x.evaluation, y.evaluation);
}

struct Seeding {
  std::vector<Seed> seeds;  // best first (better()); ties in policies() order
  // Where a policy's plan does not fit and leaves the update on the device: the same plan with
  // every optimizer state on the host (brought back for its update op), where that fits, else
  // with every gradient there too (copied out once written, back for its update op). Local
  // searches start from them as from the seeds; they are no policy's plan, so never the best
  // policy (Note [Plan search], seeding). In policies() order.
  std::vector<Seed> state_on_host;
  std::vector<SkippedPolicy> skipped;
  std::size_t evaluated = 0;
};

// Every policy decides, cheapest first and in parallel, under `stop`; the cheapest (in-core,
// which simulates nothing) always seeds. `seeding_s`: the share of the limit, for the reason a
// skipped policy gives.
Seeding seed_with_policies(const sim::Workload& workload, const sim::Machine& machine,
                           const NetworkView& view, const SearchOptions& options, const Stop& stop,
                           double seeding_s, Reporter& report);

}  // namespace memplan::search::engine
