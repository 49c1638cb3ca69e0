#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "search/policies/policy.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;
using memplan::test::temp_dir;

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, ',')) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("memplan sweep writes one CSV row per cell, each equal to memplan simulate's",
          "[cli][sweep]") {
  const std::string dir = temp_dir();
  const std::string csv_path = dir + "/sweep.csv";
  const std::string mlp = source_path("traces/mlp4.json");
  const std::string tiny = source_path("traces/resnet_tiny.json");
  const auto r = run_memplan("sweep '" + mlp + "' '" + tiny +
                             "' --memory 24KiB,1MiB --link pcie3 --bandwidth 8GB/s "
                             "--policies in-core,vdnn-all,superneurons --no-search -o '" +
                             csv_path + "'");
  REQUIRE(r.exit_status == 0);
  CHECK(r.out == "wrote " + csv_path + " (24 rows)\n");  // as counted below
  CHECK(r.err.empty());  // no terminal, no --progress, under 5 s: no progress line
  std::ifstream in(csv_path);
  std::stringstream text;
  text << in.rdbuf();
  const auto rows = lines(text.str());
  REQUIRE(rows.size() == 1 + 2 * 2 * 2 * 3);
  const auto header = split(rows[0]);
  REQUIRE(header.size() == 18);
  CHECK(header[0] == "trace");
  CHECK(header[5] == "policy");
  CHECK(header[17] == "why_not");

  std::size_t i = 1;
  for (const std::string& trace : {mlp, tiny}) {
    for (const char* memory : {"24KiB", "1MiB"}) {
      for (const char* link : {"--link pcie3", "--h2d 8GB/s --d2h 8GB/s"}) {
        for (const char* policy : {"in-core", "vdnn-all", "superneurons"}) {
          const std::string& line = rows[i++];
          CAPTURE(line);
          const auto f = split(line);
          // Fields are quoted only when they hold a comma; the why-not text may: compare the
          // leading fields only.
          REQUIRE(f.size() >= 16);
          CHECK(f[0] == trace);
          CHECK(f[5] == policy);
          const auto s = run_memplan(std::string("simulate --json --policy ") + policy +
                                     " --memory " + memory + " " + link + " '" + trace + "'");
          REQUIRE((s.exit_status == 0 || s.exit_status == 1));
          const auto j = nlohmann::json::parse(s.out);
          CHECK(f[6] == (j.at("feasible").get<bool>() ? "1" : "0"));
          CHECK(std::stoll(f[10]) == j.at("peak_bytes").get<long long>());
          if (j.at("feasible").get<bool>()) {
            CHECK(std::stod(f[7]) == Approx(j.at("step_s").get<double>()).epsilon(1e-9));
          } else {
            CHECK(f[7].empty());
            CHECK(line.find("out of device memory") != std::string::npos);
          }
        }
      }
    }
  }
}

TEST_CASE("memplan sweep --progress prints one progress line per cell on stderr", "[cli][sweep]") {
  const auto r = run_memplan("sweep --progress --policies in-core,pooch --search-rounds 2 '" +
                             source_path("traces/mlp4.json") + "'");
  REQUIRE(r.exit_status == 0);
  CHECK(lines(r.out).size() == 1 + 3);
  CHECK(lines(r.err).size() == 3);
  CHECK(r.err.find("sweep: 3/3 cells") != std::string::npos);
  CHECK(r.out.find("\n" + source_path("traces/mlp4.json") + ",1048576,trace,") !=
        std::string::npos);
  CHECK(r.out.find(",search,1,") != std::string::npos);
}

TEST_CASE("memplan sweep rejects bad input with exit 2, one line, and no CSV", "[cli][sweep]") {
  const std::string dir = temp_dir();
  const std::string csv = dir + "/out.csv";
  const std::string mlp = "'" + source_path("traces/mlp4.json") + "'";
  for (const std::string& args :
       {"--memory 4GiB,lots " + mlp, "--link pcie3,warp9 " + mlp, "--bandwidth 8GB/s,fast " + mlp,
        "--policies in-core,magic " + mlp, fmt::format("{} '{}/missing.json'", mlp, dir),
        "--encode zip " + mlp}) {
    CAPTURE(args);
    const auto r = run_memplan(fmt::format("sweep --no-search {} -o '{}'", args, csv));
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    CHECK(lines(r.err).size() == 1);
    CHECK_FALSE(std::filesystem::exists(csv));
  }
  const auto r = run_memplan("sweep --no-search " + mlp + " -o '" + dir + "/no/such/dir/x.csv'");
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("-o") != std::string::npos);
}

TEST_CASE("memplan sweep over jobs: interconnects and world sizes as axes, the job's columns",
          "[cli][sweep][job]") {
  const std::string dir = temp_dir();
  const std::string job = "'" + memplan::test::write_late_gather_job(dir) + "'";
  const auto r = run_memplan("sweep " + job +
                             " --policies in-core,capuchin --no-search --quiet --interconnects "
                             "recorded,nvlink4,pcie4-p2p+ib-hdr --gpus-per-node 1");
  REQUIRE(r.exit_status == 0);
  const auto rows = lines(r.out);
  REQUIRE(rows.size() == 1 + 3 * 2);
  CHECK(rows[0] ==
        "trace,memory_bytes,link,interconnect,world_size,h2d_bytes_per_s,d2h_bytes_per_s,policy,"
        "feasible,step_s,ideal_s,overhead,peak_bytes,keep,swap,recompute,encode,decide_s,"
        "note,why_not,slowest_rank,wait_s");
  // In grid order: interconnect, then policy. In core fits no rank.
  CHECK(rows[1].find(",trace,recorded,2,") != std::string::npos);
  CHECK(rows[1].find(",in-core,0,") != std::string::npos);
  CHECK(rows[1].find("rank 0: out of device memory") != std::string::npos);
  CHECK(rows[3].find(",trace,nvlink4,2,") != std::string::npos);
  CHECK(rows[5].find(",trace,pcie4-p2p+ib-hdr,2,") != std::string::npos);
  // Under its recorded times the job's ideal step is 9300 ns back to back (rank 0's 9100 ns of
  // work and the gather's 200: compare_command_test), rank 1 the last to end alone; a priced
  // all-gather changes the ideal.
  const auto recorded = split(rows[2]);
  CHECK(recorded[7] == "capuchin");
  CHECK(recorded[8] == "1");
  CHECK(recorded[10] == "0.000009300");
  CHECK(recorded[recorded.size() - 2] == "1");
  CHECK(split(rows[4])[10] != "0.000009300");

  // One rank, its peers assumed alike: priced for each world size.
  const std::string rank = "'" + memplan::test::write_late_gather_job(dir, true) + "'";
  const auto sizes = run_memplan("sweep " + rank +
                                 " --policies capuchin --no-search --quiet --world-sizes 2,8,64 "
                                 "--interconnects nvlink4+ib-ndr");
  REQUIRE(sizes.exit_status == 0);
  const auto size_rows = lines(sizes.out);
  REQUIRE(size_rows.size() == 4);
  double previous = 0;
  for (std::size_t i = 1; i < size_rows.size(); ++i) {
    const auto f = split(size_rows[i]);
    CHECK(f[4] == std::to_string(std::vector<int>{2, 8, 64}[i - 1]));
    // The all-gather over more ranks (and nodes) takes longer.
    CHECK(std::stod(f[10]) > previous);
    previous = std::stod(f[10]);
  }
  // A sweep without a job axis over a step writes today's CSV.
  const auto plain = run_memplan("sweep --no-search --policies in-core --quiet '" +
                                 source_path("traces/mlp4.json") + "'");
  REQUIRE(plain.exit_status == 0);
  CHECK(lines(plain.out)[0].rfind("trace,memory_bytes,link,h2d_bytes_per_s,", 0) == 0);
}

TEST_CASE("memplan sweep refuses a job axis it cannot apply, in one line, exit 2",
          "[cli][sweep][job][bad_input]") {
  const std::string dir = temp_dir();
  const std::string job = "'" + memplan::test::write_late_gather_job(dir) + "'";
  const std::string rank = "'" + memplan::test::write_late_gather_job(dir, true) + "'";
  const std::string step = "'" + source_path("traces/mlp4.json") + "'";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--world-sizes 8 " + job, "--world-sizes: " + dir +
                                          "/late_gather_job.json: holds a "
                                          "job of 2 ranks"},
           {"--world-sizes 8 " + step, "is the step of one GPU"},
           {"--world-sizes 1 " + rank, "rank 1 is not in a world of 1"},
           {"--world-sizes 0 " + rank, "--world-sizes"},
           {"--interconnects warp " + job, "--interconnects: warp: unknown fabric"},
           {"--interconnects nvlink4+nvlink3 " + job, "--interconnects: nvlink4+nvlink3"},
           {"--gpus-per-node 4 " + job, "--gpus-per-node"}}) {
    CAPTURE(args);
    const auto r = run_memplan("sweep --no-search --quiet " + args);
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    CHECK(lines(r.err).size() == 1);
    CHECK(r.err.find(says) != std::string::npos);
  }
}
