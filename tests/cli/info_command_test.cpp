#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/io/bad_traces.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;

TEST_CASE("memplan info prints the summary of a shipped trace", "[cli][info]") {
  const auto r = run_memplan("info '" + source_path("traces/resnet_tiny.json") + "'");
  CHECK(r.exit_status == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("in-core peak 25.22 KiB at op 'conv2_bwd'") != std::string::npos);
  CHECK(r.out.find("feature maps 6") != std::string::npos);
}

TEST_CASE("memplan info --json has the documented keys", "[cli][info]") {
  const auto r = run_memplan("info --json '" + source_path("traces/mlp4.json") + "'");
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("ops") == 17);
  CHECK(j.at("tensors") == 30);
  CHECK(j.at("feature_maps") == 4);
  CHECK(j.at("feature_map_bytes") == 5280);
  CHECK(j.at("parameter_bytes") == 231936);
  CHECK(j.at("peak_bytes_incore") == 701952);
  // Network-wide, no reuse: every tensor of the trace at once (no in-place outputs, no workspaces):
  // parameters 231936 + optimizer state 231936 + gradients 242336 + activations 10564 + input
  // 4128 = 720900 bytes, above the in-core peak by the buffers liveness frees early.
  CHECK(j.at("no_reuse_bytes") == 720900);
  CHECK(j.at("compute_s").at("forward").get<double>() == Approx(51e-6));
  CHECK(j.at("compute_s").at("backward").get<double>() == Approx(82e-6));
  CHECK(j.at("compute_s").at("update").get<double>() == Approx(10e-6));
}

TEST_CASE("bad traces: one line on stderr, exit 2, nothing on stdout", "[cli][info][bad_input]") {
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  for (const auto& bad : memplan::test::bad_traces()) {
    CAPTURE(bad.name);
    const auto path = dir / "bad.json";
    std::ofstream(path) << bad.text;
    const auto r = run_memplan("info '" + path.string() + "'");
    CAPTURE(r.err);
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    REQUIRE(!r.err.empty());
    CHECK(r.err.find('\n') == r.err.size() - 1);  // exactly one line
    CHECK(r.err.find(path.string()) != std::string::npos);
    CHECK(r.err.find(bad.problem) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a missing file and a bad flag are one clear line and exit 2", "[cli][bad_input]") {
  auto r = run_memplan("info /nonexistent/trace.json");
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("/nonexistent/trace.json: cannot open") != std::string::npos);
  r = run_memplan("info --frobnicate '" + source_path("traces/mlp4.json") + "'");
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("frobnicate") != std::string::npos);
  r = run_memplan("");
  CHECK(r.exit_status == 2);
}
