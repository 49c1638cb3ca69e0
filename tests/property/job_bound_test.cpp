// The lower bound on a job's step (search/bound/job_bound.hpp, Note [A job's lower bound])
// against every policy of the job's comparison on random two-rank jobs (fixed seeds): the ranks
// of late_gather_job (tests/support/job_workloads.hpp) with random durations, recorded starts,
// device memory and link, a third of them with a host side (each op dispatched after a random
// host time, the host waiting for the device after one op in five). No row that fits runs the
// job faster than the bound, alone or back to back. (Seed 3 found the job's period taken as its
// earliest start's growth while one rank's host ran ahead of a device held back by its peer:
// vdnn-all ran 4384 ns a step where the devices took 12,820; sim/job_simulation.cpp now takes
// the job's end's growth there.)
#include <catch2/catch.hpp>

#include "search/bound/job_bound.hpp"
#include "search/studies/job_comparison.hpp"
#include "tests/property/random_graphs.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using memplan::test::Rng;
using memplan::test::uniform;

TEST_CASE("no plan of a random job is faster than the job's lower bound",
          "[property][bound][job]") {
  constexpr int kCases = 60;
  int checked = 0;
  int checked_back_to_back = 0;
  // Bounds over the job in core, alone or back to back: a rank's own bound set them.
  int over_in_core = 0;
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed));
    Job job;
    for (std::int32_t r = 0; r < 2; ++r) {
      Workload w = memplan::test::late_gather_rank(
          r, uniform(rng, 100, 3000), uniform(rng, 100, 3000), uniform(rng, 100, 4000));
      w.distributed->step_start_ns = 1000000 + uniform(rng, 0, 5000);
      if (seed % 3 == 0) {
        for (Op& op : w.ops) {
          const bool waits = uniform(rng, 0, 4) == 0;
          op.host = HostSide{uniform(rng, 0, 1500), waits, waits ? uniform(rng, 0, 1000) : 0};
        }
      }
      job.ranks.push_back(std::move(w));
    }
    validate(job, "a random job");
    const Bytes memory = uniform(rng, 4, 8) * 1024;
    const double link = static_cast<double>(uniform(rng, 200, 4000)) * 1e6;
    const std::vector<Machine> machines(2, memplan::test::test_machine(memory, link));
    const JobComparison comparison = compare_job_policies(job, machines);
    REQUIRE(comparison.lower_bound);
    const JobLowerBound& bound = *comparison.lower_bound;
    over_in_core += bound.job.fits && (bound.job.bound_ns > bound.job.ideal_ns ||
                                       *bound.job.period_bound_ns > bound.job.ideal_period_ns)
                        ? 1
                        : 0;
    for (const JobComparisonRow& row : comparison.rows) {
      if (!row.feasible()) continue;
      CAPTURE(row.policy, memory, row.run.timeline.step_ns, row.run.period_ns, bound.job.bound_ns,
              *bound.job.period_bound_ns);
      REQUIRE(bound.job.fits);
      REQUIRE(row.run.timeline.step_ns >= bound.job.bound_ns);
      REQUIRE(row.run.period_ns >= *bound.job.period_bound_ns);
      ++checked;
      checked_back_to_back += seed % 3 == 0 ? 1 : 0;
    }
  }
  CHECK(checked > kCases * 5);
  CHECK(checked_back_to_back > kCases);
  CHECK(over_in_core > 0);
}
