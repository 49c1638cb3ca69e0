// `memplan search` on a job of several ranks (search/studies/job_search.hpp): a policy's plans at
// the job's lower bound, the job simulated together; and its refusals. The
// job is late_gather_job (tests/support/job_workloads.hpp), under the link its numbers are worked
// out with (tests/search/studies/job_studies_test.cpp).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "io/plan_io.hpp"
#include "io/trace_io.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::temp_dir;

namespace {

constexpr const char* kLink = " --h2d 1.024GB/s --d2h 1.024GB/s --latency 0us";
constexpr const char* kQuick = " --maps-only --deterministic --threads 2 --time-limit 60";

}  // namespace

TEST_CASE("memplan search on a job: a policy's plans per rank, at the job's lower bound",
          "[cli][search][job]") {
  // Each rank deciding for itself, a policy gives the job in core back to back, 9300 ns, which is
  // the job's lower bound (tests/search/bound/job_bound_test.cpp): within the gap before any
  // search, so no rank is searched (tests/search/studies/job_studies_test.cpp searches them).
  const std::string dir = temp_dir();
  const std::string job = "'" + memplan::test::write_late_gather_job(dir) + "'";
  const auto text = run_memplan("search " + job + kLink + kQuick);
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.rfind("searched   no rank: ", 0) == 0);
  CHECK(text.out.find("'s plans, each rank its own decision, are within 0.5% of the job's lower "
                      "bound (no plans are more than that faster)\n") != std::string::npos);
  CHECK(text.out.find("(within 0.5% of the lower bound)\n") != std::string::npos);
  CHECK(text.out.find("job         2 of 2 ranks (nccl), plan search") != std::string::npos);
  CHECK(text.out.find("ms alone, from the first rank's start to the last rank's end: rank 1)") !=
        std::string::npos);

  const std::string plan = dir + "/plan.json";
  const auto json = run_memplan("search --json -o '" + plan + "' " + job + kLink + kQuick);
  REQUIRE(json.exit_status == 0);
  const auto j = nlohmann::json::parse(json.out);
  for (const char* key : {"policy",
                          "plans_from",
                          "searched_plans_step_s",
                          "feasible",
                          "step_s",
                          "step_alone_s",
                          "slowest_rank",
                          "searched_rank",
                          "ideal_s",
                          "searched_rank_step_s",
                          "best_policy",
                          "best_policy_feasible",
                          "best_policy_rank_step_s",
                          "evaluated",
                          "rounds",
                          "converged",
                          "search_s",
                          "within_gap",
                          "lower_bound_s",
                          "period_lower_bound_s",
                          "gap",
                          "ranks"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j.at("policy") == "search");
  CHECK(j.at("searched_rank") == 1);
  // No plans were searched; a policy's, each rank deciding for itself, give the ideal step, 9300
  // (compare_command_test), and are the answer.
  CHECK(j.at("within_gap") == true);
  CHECK(j.at("searched_plans_step_s").is_null());
  CHECK(j.at("rounds") == 0);
  CHECK(j.at("ideal_s") == Approx(9300e-9));
  CHECK(j.at("step_s") == Approx(9300e-9));
  CHECK(j.at("plans_from") != "search");
  CHECK(j.at("gap") == 0.0);  // the job in core back to back bounds it (job_bound_test)
  REQUIRE(j.at("ranks").size() == 2);
  CHECK(j.at("ranks")[0].at("plan") == "policy");
  // The plans written are the answer's, one per rank: they simulate the job to the same step.
  REQUIRE(std::filesystem::exists(plan));
  CHECK(nlohmann::json::parse(memplan::test::read_text(plan)).at("format") == "memplan-job-plan");
  const auto again = run_memplan("simulate --json '" + dir + "/late_gather_job.json' --plan '" +
                                 plan + "'" + kLink);
  REQUIRE(again.exit_status == 0);
  CHECK(nlohmann::json::parse(again.out).at("step_s") == j.at("step_s"));
  // One rank's trace is refused the job's plans in one line.
  const auto one_rank = run_memplan("simulate '" + memplan::test::write_late_gather_job(dir, true) +
                                    "' --plan '" + plan + "'" + kLink);
  CHECK(one_rank.exit_status == 2);
  CHECK(one_rank.err == "memplan: " + plan +
                            ": $.format: a job's plans, one per rank: give them with the job's "
                            "trace\n");
}

TEST_CASE("memplan search on a job that fits nowhere exits 1 and writes no plan",
          "[cli][search][job]") {
  const std::string dir = temp_dir();
  const std::string job = "'" + memplan::test::write_late_gather_job(dir) + "'";
  const auto r =
      run_memplan("search --memory 2KiB -o '" + dir + "/plan.json' " + job + kLink + kQuick);
  CHECK(r.exit_status == 1);
  CHECK(r.err.find("no plan found that fits every rank (no plan written)") != std::string::npos);
  CHECK(r.out.find("infeasible  rank ") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/plan.json"));
}

TEST_CASE("memplan search --exact refuses a job in one line, exit 2", "[cli][search][job]") {
  const std::string job = "'" + memplan::test::write_late_gather_job(temp_dir()) + "'";
  const auto r = run_memplan("search --exact " + job);
  CHECK(r.exit_status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("--exact: ") != std::string::npos);
  CHECK(r.err.find("holds a job of 2 ranks") != std::string::npos);
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

TEST_CASE("the demo's search never loses to a row of the demo's compare", "[cli][search]") {
  // #40 item 8: compare ranked DTR first at 176.353 ms back to back while search optimised the
  // step alone and answered a plan of 176.407 ms back to back. Both now rank by the step a
  // training loop sees; the search starts from every policy's plan, so it can only gain on them.
  const std::string demo = "'" + memplan::test::source_path("traces/resnet50_b32_v100.json") +
                           "' --memory 2GiB --link pcie3";
  const auto compare = run_memplan("compare --json " + demo);
  REQUIRE(compare.exit_status == 0);
  std::vector<double> fits;  // each row's step back to back, of the rows that fit
  const auto rows = nlohmann::json::parse(compare.out).at("rows");
  for (const auto& row : rows) {
    if (row.at("feasible").get<bool>()) fits.push_back(row.at("step_s").get<double>());
  }
  REQUIRE(!fits.empty());
  const double best = *std::min_element(fits.begin(), fits.end());
  const auto search = run_memplan("search --json --rounds 1 --deterministic --threads 2 " + demo);
  REQUIRE(search.exit_status == 0);
  const auto j = nlohmann::json::parse(search.out);
  CHECK(j.at("step_s").get<double>() <= best);
  CHECK(j.at("best_policy_step_s").get<double>() == Approx(best));
  // The step alone is reported beside it, labelled: on this host-bound step it is longer.
  CHECK(j.at("step_alone_s").get<double>() > j.at("step_s").get<double>());
}
