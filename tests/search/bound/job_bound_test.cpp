// The lower bound on a job's step (search/bound/job_bound.hpp): on late_gather_job
// (tests/support/job_workloads.hpp; its numbers are those of tests/search/studies/
// job_studies_test.cpp) worked out by hand, and never above a plan of the job's comparison on it
// and on the real jobs of ../shared/data/kineto-multirank.
//
// late_gather_job in 5 KiB, 1 KiB a microsecond each way. In core with unlimited memory the job
// runs 11300 alone (rank 1's long g1 ends it) and 9300 back to back (rank 1 starts its next step
// 2000 later and no longer waits at the gather); alone, rank 0 runs 9300 and rank 1 8700. Each
// rank's own bound (plans keeping x on the device): at f3 1 KiB must be away, and only a can go.
//   - rank 0: a's copy-out [1000, 2000] ends before f3's ideal start, 3200: free, 9300.
//   - rank 1: a fraction s of a copied out after f1 (ideal end 300) makes f3 start no earlier than
//     300 + 1000 s; a fraction r recomputed re-runs f1 (300) after f3; and f3 starts no earlier
//     than 600 (the gather), f3 and the ops after it take 8100. The step is at least
//     max(300 + 1000 s, 600) + 8100 + 300 r with r + s = 1: least at r = 0.7, 8910. The bound is
//     that less its margin for rounding (a billionth, then 1 ns), rounded down: 8908.
// Neither rank's bound reaches the job in core, which every plan that keeps the update (there is
// none here) on the device adds to: the job's bound is the job in core, 11300 alone and 9300 back
// to back; rank 0's own bound is as high, 9300, and names it.
#include <filesystem>

#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "core/machine.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "search/bound/job_bound.hpp"
#include "search/engine/plan_search.hpp"
#include "search/studies/job_comparison.hpp"
#include "search/studies/job_search.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

std::vector<Machine> late_gather_machines(Bytes memory = kLateGatherMemory) {
  return std::vector<Machine>(2, test_machine(memory, kLateGatherLink));
}

// Every row of the job's comparison that fits is no faster than the job's bound, alone and back
// to back; the number of rows that fit.
std::size_t rows_over_the_bound(const Job& job, const std::vector<Machine>& machines) {
  const JobComparison comparison = compare_job_policies(job, machines);
  REQUIRE(comparison.lower_bound);
  const LowerBound& bound = comparison.lower_bound->job;
  std::size_t fitting = 0;
  for (const JobComparisonRow& row : comparison.rows) {
    if (!row.feasible()) continue;
    CAPTURE(row.policy, machines.front().memory_bytes);
    REQUIRE(bound.fits);
    CHECK(row.run.timeline.step_ns >= bound.bound_ns);
    CHECK(row.run.period_ns >= *bound.period_bound_ns);
    ++fitting;
  }
  return fitting;
}

}  // namespace

TEST_CASE("golden job bound: each rank's own bound, and the job in core above them",
          "[search][bound][job]") {
  const Job job = late_gather_job();
  const std::vector<Machine> machines = late_gather_machines();
  BoundOptions options;
  options.host_placement = false;
  const JobLowerBound bound = job_lower_bound(job, machines, options);
  REQUIRE(bound.job.fits);
  REQUIRE(bound.bounded == std::vector<std::size_t>{0, 1});
  CHECK(bound.ranks[0].bound_ns == 9300);
  CHECK(bound.ranks[1].bound_ns == 8908);
  CHECK(bound.job.ideal_ns == 11300);
  CHECK(bound.job.ideal_period_ns == 9300);
  CHECK(bound.job.bound_ns == 11300);
  CHECK(*bound.job.period_bound_ns == 9300);
  CHECK(bound.setting_rank == std::optional<std::size_t>{0});
  // With host placement rank 1 may also send x to the host over f3 (it is read again only by
  // g1): its bound falls to its step alone in core, 8700; there is no update to move, so the job
  // in core still bounds every plan.
  const JobLowerBound any = job_lower_bound(job, machines);
  CHECK(any.ranks[1].bound_ns == 8700);
  CHECK(any.job.bound_ns == 11300);
  CHECK(*any.job.period_bound_ns == 9300);

  // The job's search meets it: compare's best row (each rank its own decision) runs the job in
  // core's 9300 back to back (job_studies_test), so the answer is within 0% of the best possible,
  // before any rank is searched.
  SearchOptions so;
  so.threads = 2;
  so.deterministic = true;
  so.time_limit_s = 60;
  so.host_placement = false;
  const JobSearchResult found = search_job(job, machines, so);
  CHECK(found.within_gap);  // no rank searched: the best policy is within the gap
  CHECK(found.search.rounds == 0);
  CHECK(found.run.period_ns == 9300);
  CHECK(*found.lower_bound.job.period_bound_ns == 9300);
  const nlohmann::json j = job_search_json(found, job, machines);
  CHECK(j.at("lower_bound_s") == Approx(11300e-9));
  CHECK(j.at("period_lower_bound_s") == Approx(9300e-9));
  CHECK(j.at("gap") == 0.0);
  CHECK(j.at("lower_bound_rank") == 0);
  CHECK_THAT(job_search_text(found, job, machines),
             Catch::Contains("0.009 ms back to back (the ideal step back to back): within 0.0% of "
                             "the best possible\nlower bound set by rank 0's own (2 of 2 ranks "
                             "bounded, each alone)\n"));
}

TEST_CASE("golden job bound: a rank's start and its own bound over the job in core",
          "[search][bound][job]") {
  // Rank 1 recorded its start 5000 after rank 0's. In core: rank 1 reaches the gather at 5400,
  // rank 0 waits there from 3000, and the job ends with rank 1 at 5000 + 8700 = 13700 alone.
  // In 5 KiB rank 1's own bound puts it no earlier than 5000 + 8908 = 13908: over the job in
  // core, which it therefore sets.
  Job job = late_gather_job();
  job.ranks[0].distributed->step_start_ns = 100000;
  job.ranks[1].distributed->step_start_ns = 105000;
  BoundOptions options;
  options.host_placement = false;
  const JobLowerBound bound = job_lower_bound(job, late_gather_machines(), options);
  REQUIRE(bound.job.fits);
  CHECK(bound.job.ideal_ns == 13700);
  CHECK(bound.job.bound_ns == 13908);
  // Where nothing needs to leave (6 KiB), the job in core is the bound alone.
  const JobLowerBound roomy = job_lower_bound(job, late_gather_machines(6144), options);
  CHECK(roomy.job.bound_ns == 13700);
}

TEST_CASE("no plan of a job's comparison is faster than the job's bound", "[search][bound][job]") {
  const Job job = late_gather_job();
  std::size_t fitting = 0;
  for (const Bytes memory : {Bytes{4096}, Bytes{5120}, Bytes{6144}, Bytes{1} << 20})
    fitting += rows_over_the_bound(job, late_gather_machines(memory));
  CHECK(fitting > 20);

  // The real MI300X job (four ranks whose steps start apart and wait at their collectives) at
  // three budgets below its in-core peak.
  const auto file = std::filesystem::path(MEMPLAN_SOURCE_DIR) /
                    "../shared/data/kineto-multirank/mi300x_resnet_ddp_4ranks_merged.json.gz";
  if (!std::filesystem::exists(file)) {
    WARN(file.string() << " is not present (../shared beside the repository): skipped");
    return;
  }
  const Job real =
      memplan::importers::import_kineto_job(memplan::importers::read_kineto_job({file})).job;
  std::size_t real_fitting = 0;
  for (const double share : {0.9, 0.7, 0.5}) {
    std::vector<Machine> machines;
    for (const Workload& w : real.ranks) {
      MachineOverrides budget;
      budget.memory_bytes = static_cast<Bytes>(share * static_cast<double>(incore_peak(w).bytes));
      machines.push_back(make_machine(w.device, budget));
    }
    real_fitting += rows_over_the_bound(real, machines);
  }
  CHECK(real_fitting > 0);
}
