#include <string>
#include <vector>

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

namespace {

// Splits one CSV record (RFC 4180 quoting, no line breaks inside fields).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("memplan compare --csv says why a plan does not fit, in a quoted last column",
          "[cli][compare]") {
  const std::string trace = "'" + source_path("traces/resnet_tiny.json") + "'";
  const auto r = run_memplan("compare --csv --memory 24KiB " + trace);
  REQUIRE(r.exit_status == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 1 + memplan::search::policies().size());
  const auto header = csv_fields(lines[0]);
  CHECK(header.back() == "why_not");
  for (std::size_t i = 1; i < lines.size(); ++i) {
    CAPTURE(lines[i]);
    const auto fields = csv_fields(lines[i]);
    REQUIRE(fields.size() == header.size());
    CHECK(fields[1] == "0");  // nothing fits 24 KiB (the --json test above)
    // The out-of-memory line names the op in quotes and lists live bytes with commas: it only
    // survives as one field because it is quoted.
    CHECK(fields.back().rfind("out of device memory at op '", 0) == 0);
    CHECK(fields.back().find(" missing; live ") != std::string::npos);
  }
  // Where the plan fits the column is empty.
  const auto roomy = run_memplan("compare --csv --memory 1MiB " + trace);
  REQUIRE(roomy.exit_status == 0);
  const auto roomy_lines = lines_of(roomy.out);
  REQUIRE(roomy_lines.size() > 1);
  CHECK(csv_fields(roomy_lines[1]).back().empty());
}

TEST_CASE("memplan compare's table prints a why-not line under each row that does not fit",
          "[cli][compare]") {
  const std::string trace = "'" + source_path("traces/resnet_tiny.json") + "'";
  const auto tight = run_memplan("compare --memory 24KiB " + trace);
  REQUIRE(tight.exit_status == 0);
  std::size_t why = 0;
  for (const std::string& line : lines_of(tight.out)) {
    if (line.find("why not: out of device memory at op '") != std::string::npos) ++why;
  }
  CHECK(why == memplan::search::policies().size());
  const auto roomy = run_memplan("compare --memory 1MiB " + trace);
  REQUIRE(roomy.exit_status == 0);
  CHECK(roomy.out.find("why not:") == std::string::npos);
}

TEST_CASE("memplan compare --encode all runs every policy with the encodings", "[cli][compare]") {
  const auto r = run_memplan("compare --json --encode all --memory 1MiB '" +
                             source_path("traces/resnet_tiny.json") + "'");
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.at("rows").size() == memplan::search::policies().size());
  for (const auto& row : j.at("rows")) {
    CAPTURE(row.at("policy"));
    CHECK(row.at("feasible") == true);
    // Policies that keep maps have something to encode on this ReLU/conv network.
    if (row.at("policy") == "in-core") CHECK(row.at("actions").at("encode").get<int>() > 0);
  }
}
