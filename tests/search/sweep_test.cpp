#include <catch2/catch.hpp>

#include "search/comparison.hpp"
#include "search/plan_search.hpp"
#include "search/policy.hpp"
#include "search/sweep.hpp"
#include "sim/input_error.hpp"
#include "sim/trace_io.hpp"
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
  const std::size_t per_point = policies().size() + 1;
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
          CHECK(row.h2d_bytes_per_s == machine.h2d_bytes_per_s);
          CHECK(row.policy == expected.policy);
          CHECK(row.ideal_ns == comparison.ideal_ns);
          CHECK(row.feasible == expected.timeline.feasible);
          CHECK(row.iteration_ns == expected.timeline.iteration_ns);
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
        CHECK(row.iteration_ns == expected.evaluation.iteration_ns);
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
    CHECK(one[i].iteration_ns == two[i].iteration_ns);
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
