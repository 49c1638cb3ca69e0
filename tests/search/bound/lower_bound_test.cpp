// The lower bound on a plan's time (search/bound/lower_bound.hpp): never above the exact optimum
// of exact mode's random instances, nor above any plan that fits among those the searches
// evaluate on them (every answer of every Evaluator, watched); and golden cases whose bound is
// worked out by hand in the comments (1 GB/s links: 1 byte per ns, no latency).
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <catch2/catch.hpp>
#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "search/bound/lower_bound.hpp"
#include "search/engine/exact.hpp"
#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "tests/search/engine/exact_instances.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// Every answer of every Evaluator while it lives: the fastest plan that fits `capacity`, and how
// many fit.
class FittingPlans {
 public:
  explicit FittingPlans(Bytes capacity)
      : capacity_(capacity),
        watcher_([this](const Machine&, const Evaluation& e) {
          if (!e.feasible || e.peak_reserved_bytes > capacity_) return;
          const std::lock_guard<std::mutex> lock(mutex_);
          ++count_;
          fastest_ = std::min(fastest_, e.iteration_ns);
        }) {
    Evaluator::watch(&watcher_);
  }
  ~FittingPlans() { Evaluator::watch(nullptr); }
  FittingPlans(const FittingPlans&) = delete;
  FittingPlans& operator=(const FittingPlans&) = delete;

  [[nodiscard]] std::size_t count() const { return count_; }
  [[nodiscard]] Nanoseconds fastest() const { return fastest_; }

 private:
  Bytes capacity_;
  std::mutex mutex_;
  std::size_t count_ = 0;
  Nanoseconds fastest_ = std::numeric_limits<Nanoseconds>::max();
  Evaluator::Watcher watcher_;
};

}  // namespace

// MEMPLAN_BOUND_INSTANCES=N prints one line per instance (bound, optimum, gap) for N instances.
TEST_CASE("the lower bound is at most the exact optimum and every fitting plan the searches "
          "evaluate", "[search][bound]") {
  std::size_t count = 24;
  const char* env = std::getenv("MEMPLAN_BOUND_INSTANCES");
  if (env != nullptr) count = std::stoul(env);
  BoundOptions maps_only;
  maps_only.host_placement = false;
  std::size_t done = 0;
  double worst_gap = 0.0;
  for (std::uint64_t seed = 1; done < count; ++seed) {
    const ExactInstance inst = exact_instance(seed, 4, 9);
    const Workload& w = inst.workload;
    const Machine& m = inst.machine;
    CAPTURE(seed, m.memory_bytes);
    const LowerBound all = lower_bound(w, m);
    const LowerBound on_device = lower_bound(w, m, maps_only);
    REQUIRE(all.fits);
    REQUIRE(on_device.fits);
    ExactOptions eo;
    eo.threads = 2;
    FittingPlans exact_plans(m.memory_bytes);
    const ExactResult exact = solve_exact(w, m, eo);
    REQUIRE(exact.optimal);
    REQUIRE(exact.evaluation.feasible);
    const Nanoseconds optimum = exact.evaluation.iteration_ns;
    CAPTURE(optimum, all.bound_ns, on_device.bound_ns, all.ideal_ns);
    CHECK(on_device.bound_ns <= optimum);
    CHECK(all.bound_ns <= optimum);
    REQUIRE(exact_plans.count() > 0);
    CHECK(on_device.bound_ns <= exact_plans.fastest());
    // The heuristic search with host placement: every plan that fits, against the general bound.
    SearchOptions so;
    so.threads = 2;
    so.deterministic = true;
    so.time_limit_s = 30;
    FittingPlans searched(m.memory_bytes);
    const SearchResult heuristic = search_plan(w, m, so);
    REQUIRE(searched.count() > 0);
    CHECK(all.bound_ns <= searched.fastest());
    REQUIRE(heuristic.lower_bound);
    CHECK(heuristic.lower_bound->bound_ns == all.bound_ns);
    const double gap = static_cast<double>(optimum) / static_cast<double>(on_device.bound_ns) - 1;
    worst_gap = std::max(worst_gap, gap);
    if (env != nullptr) {
      fmt::print("instance seed={} maps={} ideal_ns={} bound_ns={} bound_all_ns={} optimum_ns={} "
                 "gap={:.6f}\n",
                 seed, find_feature_maps(w).size(), on_device.ideal_ns, on_device.bound_ns,
                 all.bound_ns, optimum, gap);
    }
    ++done;
  }
  CHECK(worst_gap >= 0.0);
}

