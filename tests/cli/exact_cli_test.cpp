// `memplan search --exact` as a user runs it, and the lower bound both searches state.
#include <fstream>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "search/engine/exact.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;

TEST_CASE("search --exact prints the search's fields, exact: true and what it explored",
          "[search][exact][cli]") {
  const std::string trace = fmt::format("'{}'", source_path("traces/resnet_tiny.json"));
  const auto incore = run_memplan("simulate " + trace + " --policy in-core --json");
  REQUIRE(incore.exit_status == 0);
  const auto peak = nlohmann::json::parse(incore.out).at("peak_reserved_bytes").get<long long>();
  // A device a tenth smaller than the in-core peak.
  const std::string memory = fmt::format(" --memory {}B --link pcie3", peak * 9 / 10);
  const auto exact = run_memplan("search " + trace + memory + " --exact --threads 2 --json");
  CAPTURE(exact.err);
  REQUIRE(exact.exit_status == 0);
  const auto j = nlohmann::json::parse(exact.out);
  CHECK(j.at("exact") == true);
  CHECK(j.at("optimal") == true);
  CHECK(j.at("feasible") == true);
  CHECK(j.at("explored").get<long long>() >= 1);
  CHECK(j.at("evaluated").get<long long>() >= j.at("explored").get<long long>());
  CHECK(j.at("bound_violations") == 0);
  for (const char* field : {"step_s", "peak_bytes", "actions", "best_policy", "best_policy_step_s",
                            "space_plans", "search_s"}) {
    CAPTURE(field);
    CHECK(j.contains(field));
  }
  CHECK(j.at("peak_reserved_bytes").get<long long>() <= peak * 9 / 10);
  // Never slower than the heuristic search nor the best policy on the same device.
  const auto heuristic = run_memplan("search " + trace + memory + " --threads 2 --json");
  REQUIRE(heuristic.exit_status == 0);
  const auto h = nlohmann::json::parse(heuristic.out);
  CHECK(j.at("step_s").get<double>() <= h.at("step_s").get<double>());
  CHECK(j.at("step_s").get<double>() <= j.at("best_policy_step_s").get<double>());
}

TEST_CASE("search --exact refuses a large trace in one line, exit 2", "[search][exact][cli]") {
  const std::string trace = fmt::format("'{}'", source_path("traces/resnet50_b32_v100.json"));
  const auto r = run_memplan("search " + trace + " --exact --memory 2GiB");
  CHECK(r.exit_status == 2);
  CHECK(r.out.empty());
  REQUIRE(!r.err.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.err.find(fmt::format("at most {}", memplan::search::kExactMaxMaps)) != std::string::npos);
}

TEST_CASE("search and search --exact on a trace without ops answer the empty plan, no crash",
          "[search][exact][cli]") {
  // #40 item 3: the branch and bound took the largest per-op memory bound of no ops (SIGSEGV),
  // and the search printed "-nan%" against a best policy of no time.
  auto trace = nlohmann::json::parse(memplan::test::read_text(source_path("traces/mlp4.json")));
  trace["tensors"] = nlohmann::json::array();
  trace["ops"] = nlohmann::json::array();
  const std::string path = memplan::test::temp_dir() + "/no_ops.json";
  std::ofstream(path) << trace.dump();
  const auto exact = run_memplan("search '" + path + "' --exact --threads 2 --json");
  CAPTURE(exact.err);
  REQUIRE(exact.exit_status == 0);
  const auto j = nlohmann::json::parse(exact.out);
  CHECK(j.at("optimal") == true);
  CHECK(j.at("feasible") == true);
  CHECK(j.at("step_s") == 0);
  const auto heuristic = run_memplan("search '" + path + "' --rounds 1 --threads 2");
  CAPTURE(heuristic.err);
  CHECK(heuristic.exit_status == 0);
  CHECK(heuristic.out.find("nan") == std::string::npos);
  CHECK(heuristic.out.find("(+0.0%)") != std::string::npos);
}

TEST_CASE("memplan search states the lower bound and the plan's gap to it",
          "[search][cli][bound]") {
  const std::string trace = fmt::format("'{}'", source_path("traces/resnet_tiny.json"));
  const auto incore = run_memplan("simulate " + trace + " --policy in-core --json");
  REQUIRE(incore.exit_status == 0);
  const auto peak = nlohmann::json::parse(incore.out).at("peak_reserved_bytes").get<long long>();
  const std::string memory = fmt::format(" --memory {}B --link pcie3 --threads 2", peak * 9 / 10);
  for (const char* mode : {"", " --exact"}) {
    CAPTURE(mode);
    const auto json = run_memplan("search " + trace + memory + mode + " --json");
    REQUIRE(json.exit_status == 0);
    const auto j = nlohmann::json::parse(json.out);
    const double bound = j.at("lower_bound_s").get<double>();
    const double time = j.at("step_s").get<double>();
    CHECK(bound > 0);
    CHECK(bound <= time);
    CHECK(j.at("gap").get<double>() == Approx(time / bound - 1).margin(1e-9));
    CHECK(j.at("period_lower_bound_s").is_null());  // no host side: the step alone is the step
    const auto text = run_memplan("search " + trace + memory + mode);
    REQUIRE(text.exit_status == 0);
    CHECK(text.out.find(fmt::format("lower bound {:.3f} ms", bound * 1e3)) != std::string::npos);
    CHECK(text.out.find(fmt::format("within {:.1f}% of the best possible",
                                    j.at("gap").get<double>() * 100)) != std::string::npos);
  }
  // --gap: a search whose plan is within it of the bound stops there, and says so.
  const auto wide = run_memplan("search " + trace + memory + " --gap 1000% --json");
  REQUIRE(wide.exit_status == 0);
  const auto w = nlohmann::json::parse(wide.out);
  CHECK(w.at("within_gap") == true);
  CHECK(w.at("gap").get<double>() <= 10.0);
  const auto wide_text = run_memplan("search " + trace + memory + " --gap 10");
  REQUIRE(wide_text.exit_status == 0);
  CHECK(wide_text.out.find("(within 1000% of the lower bound)") != std::string::npos);
  // Where nothing fits, there is no gap.
  const auto none = run_memplan("search " + trace + " --memory 4KiB --json");
  REQUIRE(none.exit_status == 1);
  const auto j = nlohmann::json::parse(none.out);
  CHECK(j.at("gap").is_null());
}

TEST_CASE("a step with a host side: the gap is of the step back to back, against its own bound",
          "[search][cli][bound]") {
  // The imported ResNet-50 step is CPU-bound (about 176 ms back to back, 186 ms alone): its plans
  // are ranked back to back, and the gap is that step's against the bound back to back (Note [A
  // bound on the step back to back] in search/bound/lower_bound.cpp), not the step alone's.
  const std::string trace = fmt::format("'{}'", source_path("traces/resnet50_b32_v100.json"));
  const auto json =
      run_memplan("search " + trace + " --memory 2GiB --time-limit 3 --threads 2 --json");
  REQUIRE(json.exit_status == 0);
  const auto j = nlohmann::json::parse(json.out);
  const double period_bound = j.at("period_lower_bound_s").get<double>();
  const double step = j.at("step_s").get<double>();
  CHECK(period_bound <= step);
  CHECK(period_bound < j.at("lower_bound_s").get<double>());  // CPU-bound: well under it
  CHECK(j.at("gap").get<double>() == Approx(step / period_bound - 1).margin(1e-9));
  const auto text = run_memplan("search " + trace + " --memory 2GiB --time-limit 3 --threads 2");
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find(fmt::format("{:.3f} ms back to back", period_bound * 1e3)) !=
        std::string::npos);
  const auto compare = run_memplan("compare " + trace + " --memory 2GiB");
  REQUIRE(compare.exit_status == 0);
  CHECK(compare.out.find("gap: each plan's step back to back against its lower bound") !=
        std::string::npos);
}
