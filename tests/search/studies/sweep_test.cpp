#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "search/engine/plan_search.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/comparison.hpp"
#include "search/studies/job_comparison.hpp"
#include "search/studies/sweep.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/policy_counts.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using memplan::test::source_path;

namespace {

SweepGrid small_grid() {
  SweepGrid grid;
  for (const char* name : {"traces/mlp4.json", "traces/resnet_tiny.json"}) {
    grid.traces.push_back({name, read_trace(source_path(name))});
  }
  // mlp4 fits its own 1 MiB; 24 KiB is tight for resnet_tiny and impossible for mlp4.
  grid.memories = {std::nullopt, Bytes{24} * 1024};
  grid.links = sweep_links({"pcie3"}, {"8GB/s"});
  return grid;
}

SweepOptions small_options(int threads) {
  SweepOptions options;
  options.threads = threads;
  options.search.time_limit_s = 60;  // the tiny traces converge long before
  options.search.max_rounds = 4;
  return options;
}

}  // namespace

TEST_CASE("sweep rows come in grid order and match compare and search cell by cell",
          "[search][sweep]") {
  const SweepGrid grid = small_grid();
  const std::vector<SweepRow> rows = run_sweep(grid, small_options(2));
  const std::size_t per_point = memplan::test::unsharded_policy_count() + 1;
  REQUIRE(rows.size() == 2 * 2 * 2 * per_point);

  std::size_t i = 0;
  for (const SweepTrace& trace : grid.traces) {
    for (const auto& memory : grid.memories) {
      for (const SweepLink& link : grid.links) {
        MachineOverrides overrides = link.overrides;
        overrides.memory_bytes = memory;
        const Machine machine = make_machine(trace.workload.device, overrides);
        const Comparison comparison = compare_policies(trace.workload, machine);
        for (const ComparisonRow& expected : comparison.rows) {
          const SweepRow& row = rows[i++];
          CAPTURE(trace.name, machine.memory_bytes, link.label, expected.policy);
          CHECK(row.trace == trace.name);
          CHECK(row.link == link.label);
          CHECK(row.memory_bytes == machine.memory_bytes);
          CHECK(row.h2d_bytes_per_s == machine.link.h2d_bytes_per_s);
          CHECK(row.policy == expected.policy);
          CHECK(row.ideal_ns == comparison.ideal_ns);
          CHECK(row.feasible == expected.timeline.feasible);
          CHECK(row.step_ns == expected.step_ns());
          CHECK(row.peak_bytes == expected.timeline.peak_bytes);
          const auto counts = expected.decision.plan.action_counts();
          CHECK(row.keep == counts[0]);
          CHECK(row.swap == counts[1]);
          CHECK(row.recompute == counts[2]);
          CHECK(row.encode == counts[3]);
          CHECK(row.why_not.empty() == row.feasible);
        }
        SearchOptions so;
        so.threads = 1;
        so.deterministic = true;
        so.time_limit_s = 60;
        so.max_rounds = 4;
        const SearchResult expected = search_plan(trace.workload, machine, so);
        const SweepRow& row = rows[i++];
        CAPTURE(trace.name, machine.memory_bytes, link.label);
        CHECK(row.policy == "search");
        CHECK(row.feasible == expected.evaluation.feasible);
        CHECK(row.step_ns == expected.evaluation.step_ns);
        CHECK(row.peak_bytes == expected.evaluation.peak_bytes);
        CHECK(row.note.rfind("from " + expected.best_policy, 0) == 0);
      }
    }
  }
  // The 8 GB/s link is slower than pcie3's 16 GB/s.
  CHECK(rows[per_point].h2d_bytes_per_s == 8e9);
  CHECK(rows[0].h2d_bytes_per_s == 16e9);
}

TEST_CASE("sweep gives the same rows with one thread and with two", "[search][sweep]") {
  const SweepGrid grid = small_grid();
  const auto one = run_sweep(grid, small_options(1));
  const auto two = run_sweep(grid, small_options(2));
  REQUIRE(one.size() == two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(one[i].policy == two[i].policy);
    CHECK(one[i].step_ns == two[i].step_ns);
    CHECK(one[i].peak_bytes == two[i].peak_bytes);
    CHECK(one[i].why_not == two[i].why_not);
  }
}

TEST_CASE("sweep reports progress once per cell", "[search][sweep]") {
  SweepGrid grid = small_grid();
  grid.policies = {"in-core", "vdnn-all"};
  grid.search = false;
  SweepOptions options = small_options(2);
  std::size_t calls = 0;
  std::size_t last = 0;
  options.on_progress = [&](const SweepProgress& p) {
    ++calls;
    CHECK(p.done == last + 1);
    CHECK(p.total == 2 * 2 * 2 * 2);
    last = p.done;
  };
  const auto rows = run_sweep(grid, options);
  CHECK(rows.size() == 16);
  CHECK(calls == 16);
  CHECK(rows[1].policy == "vdnn-all");
}

TEST_CASE("sweep rejects unknown policies and links before running", "[search][sweep]") {
  SweepGrid grid = small_grid();
  grid.policies = {"in-core", "magic"};
  CHECK_THROWS_AS(run_sweep(grid, small_options(1)), InputError);
  CHECK_THROWS_AS(sweep_links({"warp9"}, {}), InputError);
  CHECK_THROWS_AS(sweep_links({}, {"fast"}), InputError);
  CHECK(sweep_links({}, {}).front().label == "trace");
}

TEST_CASE("sweep CSV quotes fields with commas", "[search][sweep]") {
  SweepRow row;
  row.trace = "a,b.json";
  row.link = "pcie3";
  row.policy = "in-core";
  row.why_not = "out of memory at \"fc\", 3 KiB missing";
  const std::string csv = sweep_csv({row});
  CHECK(csv.rfind("trace,memory_bytes,link,", 0) == 0);
  CHECK(csv.find("\n\"a,b.json\",0,pcie3,") != std::string::npos);
  CHECK(csv.find(",\"out of memory at \"\"fc\"\", 3 KiB missing\"\n") != std::string::npos);
}

TEST_CASE("any subset of a sweep's cells gives the whole grid's rows for them", "[search][sweep]") {
  SweepGrid grid = small_grid();
  grid.policies = {"in-core", "vdnn-all"};
  SweepOptions options = small_options(2);
  options.deterministic = true;
  const auto all = run_sweep(grid, options);
  const Sweep sweep(grid);
  REQUIRE(sweep.size() == all.size());  // 2 traces x 2 memories x 2 links x (2 policies + search)
  REQUIRE(sweep.size() == 24);
  // Every third cell from the 2nd, backwards: what one rank of three runs, in any order.
  const std::vector<std::size_t> cells{22, 19, 16, 13, 10, 7, 4, 1};
  const auto some = sweep.run(cells, options);
  REQUIRE(some.size() == cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    CAPTURE(cells[i]);
    CHECK(sweep_csv_line(some[i]) == sweep_csv_line(all[cells[i]]));
    CHECK(some[i].decide_s == 0.0);  // deterministic
  }
}

TEST_CASE("a sweep resumes from the rows of its CSV cut short, not from another grid's",
          "[search][sweep]") {
  SweepGrid grid = small_grid();
  grid.policies = {"in-core", "vdnn-all"};
  grid.search = false;
  const auto rows = run_sweep(grid, small_options(1));
  const std::string csv = sweep_csv(rows);
  const Sweep sweep(grid);

  CHECK(sweep.finished_rows("", "x.csv").empty());
  CHECK(sweep.finished_rows(sweep_csv_header(), "x.csv").empty());
  // The header, 5 whole rows and 10 bytes of the 6th. Row 5 (mlp4 in-core at 24 KiB) does not
  // fit: its why-not is quoted, with commas in it.
  std::string partial = sweep_csv_header();
  for (std::size_t i = 0; i < 5; ++i) partial += sweep_csv_line(rows[i]);
  const auto kept = sweep.finished_rows(partial + sweep_csv_line(rows[5]).substr(0, 10), "x.csv");
  REQUIRE(kept.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(kept[i] == sweep_csv_line(rows[i]));
  CHECK(kept[4].find(",\"out of device memory") != std::string::npos);
  CHECK(sweep.finished_rows(csv, "x.csv").size() == rows.size());

  // Rows out of order (cell 2's row where cell 1's belongs), another header, a row too many.
  const std::string swapped =
      sweep_csv_header() + sweep_csv_line(rows[0]) + sweep_csv_line(rows[2]);
  CHECK_THROWS_WITH(sweep.finished_rows(swapped, "x.csv"),
                    Catch::Contains("x.csv:3") && Catch::Contains("row 2 is not cell 2"));
  CHECK_THROWS_WITH(sweep.finished_rows("trace,memory\n", "x.csv"), Catch::Contains("x.csv:1"));
  grid.memories.pop_back();
  const Sweep smaller(grid);
  CHECK_THROWS_AS(smaller.finished_rows(csv, "x.csv"), InputError);
}

namespace {

// late_gather_job (tests/support/job_workloads.hpp) as a sweep trace: rank 0, then rank 1.
SweepTrace job_trace() {
  Job job = memplan::test::late_gather_job();
  return {"job.json", job.ranks[0], {job.ranks[1]}};
}

}  // namespace

TEST_CASE("a grid of jobs runs every rank of each cell together, interconnect by interconnect",
          "[search][sweep][job]") {
  SweepGrid grid;
  grid.traces = {job_trace()};
  grid.policies = {"in-core", "capuchin"};
  grid.interconnects = sweep_interconnects({"recorded", "nvlink4+ib-ndr"}, 1);
  REQUIRE(grid.jobs());
  SweepOptions options = small_options(2);
  options.deterministic = true;
  const auto rows = run_sweep(grid, options);
  REQUIRE(rows.size() == 2 * 3);  // 2 interconnects x (2 policies + search)

  const Job job = memplan::test::late_gather_job();
  std::size_t i = 0;
  for (const SweepInterconnect& fabric : grid.interconnects) {
    std::vector<Machine> machines;
    for (const Workload& w : job.ranks)
      machines.push_back(make_machine(w.device, fabric.overrides));
    const Nanoseconds ideal = ideal_job_run(job, machines).period_ns;
    const std::vector<NetworkView> views{NetworkView(job.ranks[0]), NetworkView(job.ranks[1])};
    for (const std::string& name : grid.policies) {
      const SweepRow& row = rows[i++];
      CAPTURE(fabric.label, name);
      const JobComparisonRow expected =
          run_job_policy(*find_policy(name), job, machines, views, {}, ideal);
      CHECK(row.job);
      CHECK(row.interconnect == fabric.label);
      CHECK(row.world_size == 2);
      CHECK(row.policy == expected.policy);
      CHECK(row.ideal_ns == ideal);
      CHECK(row.feasible == expected.feasible());
      CHECK(row.step_ns == expected.step_ns());
      CHECK(row.wait_ns == expected.wait_ns());
      CHECK(row.slowest_rank == (expected.feasible() ? 1 : -1));
      CHECK(row.why_not.empty() == row.feasible);
    }
    const SweepRow& search = rows[i++];
    CHECK(search.policy == "search");
    CHECK(search.note.find("on rank 1") != std::string::npos);
  }
  CHECK(rows[0].why_not.rfind("rank 0: out of device memory at op 'f3'", 0) == 0);
  CHECK(rows[0].why_not.find("; rank 1: ") != std::string::npos);
  // A priced all-gather is not the recorded one.
  CHECK(rows[3].ideal_ns != rows[0].ideal_ns);

  // The CSV has the job's columns; a grid of jobs resumes from its own rows only.
  const Sweep sweep(grid);
  CHECK(sweep.csv_header() == sweep_csv_header(true));
  const std::string csv = sweep_csv(rows);
  CHECK(csv.rfind(sweep_csv_header(true), 0) == 0);
  CHECK(sweep.finished_rows(csv, "x.csv").size() == rows.size());
  const std::string swapped = sweep_csv_header(true) + sweep_csv_line(rows[3]);
  CHECK_THROWS_WITH(sweep.finished_rows(swapped, "x.csv"), Catch::Contains("row 1 is not cell 1"));
  CHECK_THROWS_WITH(sweep.finished_rows(sweep_csv(std::vector<SweepRow>{}), "x.csv"),
                    Catch::Contains("x.csv:1"));
}

TEST_CASE("a rank's job at another world size", "[search][sweep][job]") {
  Job one{{memplan::test::late_gather_job().ranks[1]}};
  one.ranks[0].ops[2].collective->ranks = {0, 1};  // ag's group: every rank of the world of 2
  const Job eight = with_world_size(one, 8, "rank.json");
  CHECK(eight.world_size() == 8);
  CHECK(eight.ranks[0].distributed->rank == 1);
  CHECK(eight.ranks[0].ops[2].collective->ranks.empty());      // still every rank
  CHECK(eight.ranks[0].ops[2].collective->out_bytes == 2048);  // sizes as recorded

  CHECK_THROWS_WITH(with_world_size(memplan::test::late_gather_job(), 8, "job.json"),
                    Catch::StartsWith("--world-sizes: job.json: holds a job of 2 ranks"));
  CHECK_THROWS_WITH(with_world_size(one, 1, "rank.json"),
                    Catch::Contains("rank 1 is not in a world of 1"));
  Job step = one;
  step.ranks[0].distributed.reset();
  for (Op& op : step.ranks[0].ops) op.collective.reset();
  step.ranks[0].streams.clear();
  for (Op& op : step.ranks[0].ops) {
    op.stream = 0;
    op.after.clear();
  }
  CHECK_THROWS_WITH(with_world_size(step, 8, "step.json"),
                    Catch::Contains("is the step of one GPU"));
  CHECK_THROWS_AS(sweep_interconnects({"warp"}, std::nullopt), InputError);
  CHECK_THROWS_WITH(sweep_interconnects({"nvlink4"}, 0), Catch::StartsWith("--gpus-per-node"));
  CHECK(sweep_interconnects({"nvlink4+ib-ndr"}, 4).front().overrides.network == "ib-ndr");
}
