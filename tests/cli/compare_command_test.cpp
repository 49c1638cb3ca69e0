#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "search/policy.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;

TEST_CASE("memplan compare --json has one row per policy with the simulate fields",
          "[cli][compare]") {
  const auto r =
      run_memplan("compare --json --memory 24KiB '" + source_path("traces/resnet_tiny.json") + "'");
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.at("rows").size() == memplan::search::policies().size());
  for (const auto& row : j.at("rows")) {
    for (const char* key :
         {"policy", "feasible", "iteration_s", "peak_bytes", "peak_reserved_bytes", "stall_s",
          "actions", "oom", "overhead", "decide_s"}) {
      CAPTURE(key);
      CHECK(row.contains(key));
    }
    // Nothing fits 24 KiB here (in-core needs 25.2 KiB, and 512-byte rounding costs the rest), so
    // every row carries an out-of-memory report.
    CHECK(row.at("feasible") == false);
    CHECK(row.at("oom").is_object());
  }
  CHECK(j.at("rows")[0].at("policy") == "in-core");
}

TEST_CASE("memplan compare on a device with room: every policy fits, in-core has no overhead",
          "[cli][compare]") {
  const auto r =
      run_memplan("compare --csv --memory 1MiB '" + source_path("traces/resnet_tiny.json") + "'");
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.rfind("policy,feasible,iteration_s,overhead,", 0) == 0);
  CHECK(r.out.find("\nin-core,1,0.000055100,0.000000,") != std::string::npos);
}

TEST_CASE("memplan compare rejects a bad --encode and a bad --link with exit 2",
          "[cli][compare][bad_input]") {
  auto r = run_memplan("compare --encode zip '" + source_path("traces/mlp4.json") + "'");
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("--encode") != std::string::npos);
  r = run_memplan("compare --link warp9 '" + source_path("traces/mlp4.json") + "'");
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("warp9") != std::string::npos);
  CHECK(r.out.empty());
}
