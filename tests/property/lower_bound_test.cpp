// The lower bound on a plan's time (search/bound/lower_bound.hpp, Note [Lower bound on a plan's
// time]) against random plans on random graphs (fixed seeds): a plan simulated on a device of
// exactly its reserved peak fits there, so the bound for that device may not exceed its time.
// The plans take every action (swap with random prefetch and release points, recompute, per-use
// recompute, every encoding) and random algorithms where ops have alternatives, a third place
// tensors on the host, some update there (some of those bounds lifted by the memory before the
// gradients the update waits for); the machines have random links, latencies and codec
// speeds. A third of the graphs have a host side (each op dispatched after a random host time,
// the host waiting for the device after one op in five), where the bound back to back may not
// exceed a plan's step back to back either (some of those bounds lifted over the ideal step back
// to back by the memory). The plans that update on the host are held to that case's own bound as
// well (LowerBound::host_update_bound_ns, host_update_period_bound_ns).
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/liveness.hpp"
#include "search/bound/lower_bound.hpp"
#include "sim/simulation.hpp"
#include "tests/property/random_graphs.hpp"

using namespace memplan::sim;
using memplan::search::BoundOptions;
using memplan::search::LowerBound;
using memplan::test::random_plan;
using memplan::test::random_workload;
using memplan::test::Rng;
using memplan::test::uniform;

namespace {

Machine random_machine(Rng& rng) {
  Machine m;
  m.memory_bytes = std::numeric_limits<Bytes>::max() / 4;
  m.link.h2d_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
  m.link.d2h_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
  m.link.latency_ns = uniform(rng, 0, 2000);
  m.memory_bandwidth_bytes_per_s = static_cast<double>(uniform(rng, 1, 1000)) * 1e9;
  m.host_bandwidth_bytes_per_s = static_cast<double>(uniform(rng, 1, 100)) * 1e9;
  return m;
}

// A third of the compute-stream ops get one or two alternative algorithms (cuDNN's trade: faster
// with more workspace, or slower with less), so that a device may have to run some op slower to
// fit it (Relaxation::algorithms).
void add_algorithms(Workload& w, Rng& rng) {
  for (Op& op : w.ops) {
    if (op.stream != 0 || op.collective || uniform(rng, 0, 2) != 0) continue;
    const int count = static_cast<int>(uniform(rng, 1, 2));
    for (int a = 0; a < count; ++a) {
      Algorithm alt;
      alt.name = "alt" + std::to_string(a);
      alt.duration_ns = std::max<Nanoseconds>(1, op.duration_ns * uniform(rng, 50, 200) / 100);
      alt.workspace_bytes = op.workspace_bytes * uniform(rng, 0, 200) / 100;
      op.algorithms.push_back(std::move(alt));
    }
  }
}

// Each op with alternatives runs one of them at random, or its default.
void choose_algorithms(const Workload& w, Plan& plan, Rng& rng) {
  for (const Op& op : w.ops) {
    if (op.algorithms.empty()) continue;
    const auto pick = uniform(rng, -1, static_cast<std::int64_t>(op.algorithms.size()) - 1);
    if (pick >= 0) plan.algorithms.push_back({op.id, static_cast<std::int32_t>(pick)});
  }
}

// Half the recomputed maps forget their regenerated copy after each backward use (per_use).
void per_use_some(Plan& plan, Rng& rng) {
  for (Decision& d : plan.decisions) {
    if (d.action == Action::kRecompute) d.per_use = uniform(rng, 0, 1) == 0;
  }
}

}  // namespace

TEST_CASE("no random plan that fits is faster than the lower bound", "[property][bound]") {
  // Per graph, eight random plans; the bound at each of the three smallest reserved peaks among
  // them, against every plan that fits there (the plans that set the peak are the tightest).
  // Plans that keep every other tensor on the device are held to the bound for such plans
  // (BoundOptions::host_placement off) too.
  constexpr int kCases = 300;
  constexpr int kPlansPerCase = 8;
  BoundOptions all;  // every encoding the random plans use: fp8 stands for fp16 and fp10
  all.encodings.binarize = true;
  all.encodings.sparse = true;
  all.encodings.precision_reduction = Encoding::kFp8;
  BoundOptions maps_only = all;
  maps_only.host_placement = false;
  int checked = 0;
  int pressure = 0;     // devices below the in-core peak
  int above_ideal = 0;  // bounds (maps only) above the ideal step: the program did some work
  int host_update_bound = 0;
  int update_waits = 0;  // host update bounds lifted by the update's wait for a late gradient
  int checked_back_to_back = 0;
  int checked_host_update = 0;  // plans that update on the host, against their case's bound
  // Bounds back to back over their ideal runs' by the memory: one step's run on the compute
  // stream, or the host's wait for an op.
  int memory_period = 0;
  int waited_period = 0;
  // Bounds back to back of plans that update on the host set by the update's wait for its
  // gradients: the host runs the update before it leaves the step (Note [Host stream]).
  int update_period = 0;
  int update_cycle = 0;  // the same from one step's last run to the next's
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed));
    Workload w = random_workload(rng);
    add_algorithms(w, rng);
    if (seed % 3 == 0) {
      // Each op dispatched after a random host time (on half the graphs short enough that the
      // device sets the step back to back); one in five the host then waits for.
      const Nanoseconds longest = seed % 6 == 0 ? 3000 : 100;
      for (Op& op : w.ops) {
        const Nanoseconds dispatch = uniform(rng, 0, longest);
        const bool waits = uniform(rng, 0, 4) == 0;
        op.host = HostSide{dispatch, waits, waits ? uniform(rng, 0, 2000) : 0};
      }
    }
    const Machine roomy = random_machine(rng);
    std::vector<std::pair<Plan, Timeline>> runs;
    for (int k = 0; k < kPlansPerCase; ++k) {
      Plan plan = random_plan(w, rng);
      per_use_some(plan, rng);
      choose_algorithms(w, plan, rng);
      Simulation s = simulate_plan(w, plan, roomy);
      if (s.timeline.feasible) runs.emplace_back(std::move(plan), std::move(s.timeline));
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
      return a.second.peak_reserved_bytes < b.second.peak_reserved_bytes;
    });
    for (std::size_t m = 0; m < std::min<std::size_t>(3, runs.size()); ++m) {
      Machine tight = roomy;
      tight.memory_bytes = runs[m].second.peak_reserved_bytes;
      const LowerBound bound = memplan::search::lower_bound(w, tight, all);
      const LowerBound on_device = memplan::search::lower_bound(w, tight, maps_only);
      REQUIRE(bound.fits);
      above_ideal += on_device.bound_ns > on_device.ideal_ns ? 1 : 0;
      pressure += incore_peak(w).bytes > tight.memory_bytes ? 1 : 0;
      host_update_bound += bound.host_update ? 1 : 0;
      update_waits += bound.update_waits_for.empty() ? 0 : 1;
      memory_period += bound.period_floor == LowerBound::PeriodFloor::kMemory ? 1 : 0;
      waited_period += bound.period_floor == LowerBound::PeriodFloor::kMemoryWaited ||
                               on_device.period_floor == LowerBound::PeriodFloor::kMemoryWaited
                           ? 1
                           : 0;
      update_period += bound.period_floor == LowerBound::PeriodFloor::kUpdateWaited ? 1 : 0;
      update_cycle += bound.period_floor == LowerBound::PeriodFloor::kUpdateCycle ? 1 : 0;
      for (const auto& [plan, timeline] : runs) {
        if (timeline.peak_reserved_bytes > tight.memory_bytes) continue;
        CAPTURE(m, plan.policy, timeline.iteration_ns, bound.bound_ns, bound.ideal_ns,
                bound.host_update, on_device.bound_ns);
        REQUIRE(bound.bound_ns <= timeline.iteration_ns);
        REQUIRE(bound.period_bound_ns.has_value() == (seed % 3 == 0));
        if (bound.period_bound_ns) {
          CAPTURE(timeline.period_ns, *bound.period_bound_ns);
          REQUIRE(*bound.period_bound_ns <= timeline.period_ns);
          ++checked_back_to_back;
        }
        ++checked;
        if (plan.host_update) {
          // The plans that update on the host, apart (a job's bound takes them so).
          REQUIRE(bound.host_update_bound_ns);
          REQUIRE(*bound.host_update_bound_ns <= timeline.iteration_ns);
          if (bound.period_bound_ns) {
            REQUIRE(bound.host_update_period_bound_ns);
            REQUIRE(*bound.host_update_period_bound_ns <= timeline.period_ns);
          }
          ++checked_host_update;
        }
        if (!plan.host_tensors.empty() || plan.host_update) continue;
        REQUIRE(on_device.fits);
        REQUIRE(on_device.bound_ns <= timeline.iteration_ns);
        if (on_device.period_bound_ns) REQUIRE(*on_device.period_bound_ns <= timeline.period_ns);
      }
    }
  }
  CHECK(checked > kCases * 3);
  CHECK(checked_back_to_back > kCases);
  CHECK(checked_host_update > kCases / 10);
  // Not a test of the ideal step alone: about half the devices are below the in-core peak, and a
  // fifth of those need more time than the ideal step (on the others the copies hide).
  CHECK(pressure > kCases);
  CHECK(above_ideal > kCases / 5);
  CHECK(host_update_bound > 0);
  CHECK(update_waits > 0);   // 18 of them
  CHECK(memory_period > 0);  // 4 of them
  CHECK(waited_period > 0);  // 3
  CHECK(update_period > 0);  // 39
  CHECK(update_cycle > 0);   // 9
}
