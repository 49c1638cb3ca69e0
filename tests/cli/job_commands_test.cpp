// The commands on a job of several ranks (trace format v3 `ranks`): info and simulate, their JSON,
// the Perfetto timeline with a process per rank, what-if interconnects, and the flags a job
// refuses. The job is tests/io/bad_traces.cpp's valid_two_rank_job: two alike ranks of a world of
// 2, each with an all-reduce of 64 bytes (recorded 30 ns) on an NCCL stream that the update waits
// for.
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/io/bad_traces.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;

namespace {

std::string job_file() {
  const std::string path = memplan::test::temp_dir() + "/job.json";
  std::ofstream(path) << memplan::test::valid_two_rank_job().dump();
  return path;
}

}  // namespace

TEST_CASE("info on a job: each rank, its streams and collectives", "[cli][job]") {
  const std::string job = job_file();
  const auto r = run_memplan("info " + job);
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("== rank 0\n") != std::string::npos);
  CHECK(r.out.find("== rank 1\n") != std::string::npos);
  CHECK(r.out.find("rank         1 of 2 (nccl)") != std::string::npos);
  CHECK(r.out.find("streams      2: compute (4 ops), nccl (1 ops)") != std::string::npos);
  // 64 bytes in 30 ns across 2 ranks: 64 · 2(2-1)/2 / 30e-9 s = 2.13 GB/s of bus bandwidth.
  CHECK(r.out.find("collective   all_reduce: 1 calls, 64 B, 0.000 ms recorded, bus bandwidth "
                   "2.1 GB/s (median)") != std::string::npos);
  const auto j = nlohmann::json::parse(run_memplan("info " + job + " --json").out);
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][1]["distributed"]["rank"] == 1);
  CHECK(j["ranks"][0]["collectives"]["all_reduce"]["calls"] == 1);
}

TEST_CASE("simulate a job: a line per rank, the slowest sets the step", "[cli][job]") {
  const std::string job = job_file();
  const auto r = run_memplan("simulate " + job + " --policy in-core");
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("job         2 of 2 ranks (nccl), plan in-core") != std::string::npos);
  CHECK(r.out.find("interconnect recorded") != std::string::npos);
  CHECK(r.out.find("to the last rank's end: rank 0)") != std::string::npos);  // alike: the first
  const auto j =
      nlohmann::json::parse(run_memplan("simulate " + job + " --policy in-core --json").out);
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["feasible"] == true);
  CHECK(j["world_size"] == 2);
  CHECK(j["ranks"][0]["collectives"]["calls"] == 1);
  CHECK(j["ranks"][0]["collectives"]["by_call"][0]["transfer_s"].get<double>() == Approx(30e-9));
  CHECK(j["ranks"][1]["collectives"]["wait_s"].get<double>() == 0.0);
  CHECK(j["step_alone_s"] == j["ranks"][0]["step_alone_s"]);
}

TEST_CASE("simulate a job on another interconnect prices its collectives", "[cli][job]") {
  const std::string job = job_file();
  const auto j = nlohmann::json::parse(
      run_memplan("simulate " + job + " --policy in-core --interconnect nvlink4 --json").out);
  // nvlink4: 450 GB/s, 2 us a step. A 2-rank all-reduce of S = 64 bytes: ring 2(n-1)·a +
  // 2(n-1)/n · S/B = 4000 ns + ceil(0.142 ns) = 4001 ns; tree 2·1·a + ceil(2·64/450e9 s) = 4001
  // ns: a tie, the ring.
  CHECK(j["ranks"][0]["collectives"]["by_call"][0]["transfer_s"].get<double>() == Approx(4001e-9));
  CHECK(j["ranks"][0]["machine"]["interconnect"]["name"] == "nvlink4");
}

TEST_CASE("simulate a job writes a Perfetto process per rank and refuses one-rank outputs",
          "[cli][job]") {
  const std::string job = job_file();
  const std::string dir = memplan::test::temp_dir();
  const auto r = run_memplan("simulate " + job + " --policy in-core --timeline " + dir + "/t.json");
  REQUIRE(r.exit_status == 0);
  std::ifstream in(dir + "/t.json");
  const auto trace = nlohmann::json::parse(in);
  std::set<std::string> processes;
  std::set<std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
  }
  CHECK(processes == std::set<std::string>{"rank 0", "rank 1"});
  CHECK(tracks.count("nccl") == 1);
  for (const char* flag : {"--memory-csv", "--plan-out"}) {
    const auto refused =
        run_memplan(fmt::format("simulate {} --policy in-core {} {}/x.csv", job, flag, dir));
    CHECK(refused.exit_status == 2);
    CHECK(refused.err.find("holds a job of 2 ranks") != std::string::npos);
    CHECK(!std::filesystem::exists(dir + "/x.csv"));
  }
}
