#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "io/trace_io.hpp"
#include "tests/io/bad_plans.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;

namespace {
void check_one_line(const memplan::test::CommandResult& r) {
  REQUIRE(!r.err.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);
}
}  // namespace

TEST_CASE("simulate prints a summary of the in-core plan", "[cli][simulate]") {
  const auto r = run_memplan("simulate " + memplan::test::tiny_trace() + " --policy in-core");
  CAPTURE(r.err);
  CHECK(r.exit_status == 0);
  CHECK(r.out.find("plan        in-core (keep 6, swap 0, recompute 0, encode 0)") !=
        std::string::npos);
  CHECK(r.out.find("step        0.055 ms (compute 0.055 ms, +0.0%)") != std::string::npos);
  CHECK(r.out.find("peak 25.22 KiB live") != std::string::npos);
}

TEST_CASE("simulate --json has the documented keys", "[cli][simulate]") {
  const auto r =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy swap-all --json");
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"feasible", "step_s", "peak_bytes", "peak_reserved_bytes", "stall_s", "actions", "oom"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j.at("feasible") == true);
  CHECK(j.at("oom").is_null());
  CHECK(j.at("actions").at("swap") == 6);
  CHECK(j.at("actions").at("keep") == 0);
  CHECK(j.at("step_s").get<double>() > j.at("compute_s").get<double>());
  CHECK(j.at("stall_s").get<double>() > 0);
  CHECK(j.at("peak_bytes").get<long>() <= j.at("peak_reserved_bytes").get<long>());
  // A time average of the live bytes cannot exceed their peak (tests/io/memory_measures_test.cpp
  // works one out by hand).
  CHECK(j.at("average_live_bytes").get<long>() > 0);
  CHECK(j.at("average_live_bytes").get<long>() <= j.at("peak_bytes").get<long>());
}

TEST_CASE("a faster link makes swapping cheaper, flags override the preset", "[cli][simulate]") {
  auto iteration = [](const std::string& flags) {
    const auto r = run_memplan("simulate " + memplan::test::tiny_trace() +
                               " --policy swap-all --json " + flags);
    REQUIRE(r.exit_status == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto pcie3 = iteration("--link pcie3");
  const auto c2c = iteration("--link c2c");
  CHECK(c2c.at("step_s").get<double>() < pcie3.at("step_s").get<double>());
  CHECK(pcie3.at("machine").at("h2d_bytes_per_s") == 16e9);
  const auto manual = iteration("--link pcie3 --h2d 1GB/s --d2h 2GB/s --latency 20us");
  CHECK(manual.at("machine").at("h2d_bytes_per_s") == 1e9);
  CHECK(manual.at("machine").at("d2h_bytes_per_s") == 2e9);
  CHECK(manual.at("machine").at("copy_latency_ns") == 20000);
  CHECK(manual.at("step_s").get<double>() > pcie3.at("step_s").get<double>());
}

TEST_CASE("a plan that does not fit exits 1 with the diagnosis", "[cli][simulate]") {
  auto r =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy in-core --memory 16KiB");
  CHECK(r.exit_status == 1);
  CHECK(r.out.find("infeasible  out of device memory at op '") != std::string::npos);
  check_one_line(r);
  CHECK(r.err.find("does not fit") != std::string::npos);
  r = run_memplan("simulate " + memplan::test::tiny_trace() +
                  " --policy in-core --memory 16KiB --json");
  CHECK(r.exit_status == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("feasible") == false);
  CHECK(j.at("step_s").is_null());
  const auto& oom = j.at("oom");
  CHECK(oom.at("memory") == "device");
  CHECK(oom.at("op").is_string());
  CHECK(oom.at("bytes_missing").get<long>() > 0);
  CHECK(oom.at("capacity_bytes") == 16384);
  CHECK(oom.at("live_bytes_by_kind").contains("parameter"));
}

TEST_CASE("memory too small for the parameters fails before the first op", "[cli][simulate]") {
  const auto r =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy in-core --memory 4KiB");
  CHECK(r.exit_status == 1);
  CHECK(r.err.find("out of device memory before the first op") != std::string::npos);
}

TEST_CASE("simulate writes the timeline, the memory curve and the plan", "[cli][simulate]") {
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  const auto timeline = dir / "t.json";
  const auto csv = dir / "m.csv";
  const auto plan = dir / "p.json";
  auto r = run_memplan("simulate " + memplan::test::tiny_trace() +
                       " --policy swap-all --timeline '" + timeline.string() + "' --memory-csv '" +
                       csv.string() + "' --plan-out '" + plan.string() + "' --json");
  REQUIRE(r.exit_status == 0);
  const auto trace = nlohmann::json::parse(memplan::test::read_text(timeline));
  std::set<std::string> threads;
  int counters = 0;
  int copies = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") threads.insert(e.at("args").at("name"));
    if (e.at("ph") == "C") ++counters;
    if (e.at("ph") == "X" && e.at("name") == "copy-out relu1_out") ++copies;
  }
  CHECK(threads ==
        std::set<std::string>{"compute stream", "d2h stream", "h2d stream", "compute stalls"});
  CHECK(counters > 0);
  CHECK(copies == 1);
  const std::string curve = memplan::test::read_text(csv);
  CHECK(curve.rfind("time_ns,live_bytes,reserved_bytes\n", 0) == 0);
  CHECK(std::count(curve.begin(), curve.end(), '\n') == counters + 1);
  // The written plan simulates to the same result.
  const auto again = run_memplan("simulate " + memplan::test::tiny_trace() + " --plan '" +
                                 plan.string() + "' --json");
  REQUIRE(again.exit_status == 0);
  auto first = nlohmann::json::parse(r.out);
  auto second = nlohmann::json::parse(again.out);
  CHECK(first.at("step_s") == second.at("step_s"));
  CHECK(first.at("peak_reserved_bytes") == second.at("peak_reserved_bytes"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("bad plans and flags: one line, exit 2, nothing written", "[cli][simulate][bad_input]") {
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  const auto timeline = dir / "t.json";
  const auto w = memplan::sim::read_trace(source_path("traces/resnet_tiny.json"));
  for (const auto& bad : memplan::test::bad_plans(w)) {
    CAPTURE(bad.name);
    const auto path = dir / "bad-plan.json";
    std::ofstream(path) << bad.text;
    const auto r = run_memplan("simulate " + memplan::test::tiny_trace() + " --plan '" +
                               path.string() + "' --timeline '" + timeline.string() + "'");
    CAPTURE(r.err);
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    check_one_line(r);
    CHECK(r.err.find(path.string()) != std::string::npos);
    CHECK(r.err.find(bad.problem) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(timeline));
  }
  for (const std::string flags :
       {"--policy nope", "", "--policy in-core --plan x.json", "--policy in-core --link pcie9",
        "--policy in-core --memory lots", "--policy in-core --h2d fast",
        "--policy in-core --latency soon", "--plan /nonexistent/plan.json"}) {
    CAPTURE(flags);
    const auto r = run_memplan("simulate " + memplan::test::tiny_trace() + " " + flags +
                               " --timeline '" + timeline.string() + "'");
    CAPTURE(r.err);
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    check_one_line(r);
    CHECK_FALSE(std::filesystem::exists(timeline));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulate --snapshot-out writes the step as a PyTorch memory snapshot",
          "[cli][simulate][snapshot]") {
  // #38 item 4. Read back by memplan's own snapshot reader (the pickle PyTorch's would read; the
  // Python tests load it with pickle and torch.cuda._memory_viz): the live bytes over its trace
  // peak where the simulator's do, to the byte, and its segments are the allocator's at the end.
  const std::string dir = memplan::test::temp_dir();
  const std::string trace = "'" + source_path("traces/resnet_tiny.json") + "'";
  for (const char* allocator : {"arena", "caching"}) {
    CAPTURE(allocator);
    const std::string snapshot = dir + "/" + allocator + ".pickle";
    const auto sim = run_memplan(
        fmt::format("simulate {} --policy swap-all --allocator {} --memory 64MiB --json "
                    "--snapshot-out '{}'",
                    trace, allocator, snapshot));
    REQUIRE(sim.exit_status == 0);
    const auto s = nlohmann::json::parse(sim.out);
    const auto read = run_memplan("import snapshot '" + snapshot + "' --json");
    REQUIRE(read.exit_status == 0);
    const auto d = nlohmann::json::parse(read.out).at("devices").at(0);
    CHECK(d.at("peak_live_bytes") == s.at("peak_bytes"));
    CHECK(d.at("live_bytes_at_first_event") == 0);
    CHECK(d.at("event_sizes") == "requested");
    // Every block allocated is freed but what lives past the step (parameters, optimizer
    // state): the frees are as many as the allocs less those.
    const auto& actions = d.at("actions");
    CHECK(actions.at("free_requested") == actions.at("free_completed"));
    CHECK(actions.at("alloc").get<int>() > actions.at("free_completed").get<int>());
    if (std::string(allocator) == "caching") {
      // The caching allocator's own model, replaying the snapshot's requests, ends where the
      // snapshot says the simulator's did: the same segments, reserved and allocated bytes.
      CHECK(d.at("model_reserved_bytes") == d.at("reserved_bytes"));
      CHECK(d.at("model_allocated_bytes") == d.at("allocated_bytes"));
      CHECK(d.at("peak_reserved_bytes") == s.at("peak_reserved_bytes"));
    } else {
      // The arena is one segment, as large as its highest end in use.
      CHECK(d.at("segments") == 1);
      CHECK(d.at("reserved_bytes") == s.at("peak_reserved_bytes"));
    }
  }
  // A plan that does not fit writes none; a job's ranks are refused it in one line.
  const std::string none = dir + "/none.pickle";
  CHECK(run_memplan(fmt::format("simulate {} --policy in-core --memory 4KiB --snapshot-out '{}'",
                                trace, none))
            .exit_status == 1);
  CHECK_FALSE(std::filesystem::exists(none));
  const auto job = run_memplan(fmt::format("simulate '{}' --policy in-core --snapshot-out '{}'",
                                           memplan::test::write_late_gather_job(dir), none));
  CHECK(job.exit_status == 2);
  CHECK(job.err.find("--snapshot-out") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(none));
}

TEST_CASE("simulate --policy budget-partitioner=B runs the partitioner at that budget",
          "[cli][simulate][partitioner]") {
  // The zoo's one-layer GPT: at budget 1 every map is kept (eager autograd's set); at 0 every map
  // but what no op regenerates is recomputed (tests/search/policies/todays_policies_test.cpp
  // works the budgets in between).
  const std::string trace =
      (std::filesystem::temp_directory_path() / "memplan_partitioner_gpt.json").string();
  REQUIRE(run_memplan("zoo gpt --layers 1 --hidden 64 --heads 2 --seq 16 --vocab 100 --batch 1 "
                      "--device v100-16gb -o " +
                      trace)
              .exit_status == 0);
  const auto all = run_memplan("simulate " + trace + " --policy budget-partitioner=1 --json");
  REQUIRE(all.exit_status == 0);
  CHECK(nlohmann::json::parse(all.out).at("actions").at("recompute") == 0);
  const auto none = run_memplan("simulate " + trace + " --policy budget-partitioner=0 --json");
  REQUIRE(none.exit_status == 0);
  CHECK(nlohmann::json::parse(none.out).at("actions").at("keep") == 0);
  for (const char* bad :
       {"budget-partitioner=1.5", "budget-partitioner=-0.1", "budget-partitioner=half",
        "budget-partitioner=", "budget-partitioner=nan"}) {
    CAPTURE(bad);
    const auto r = run_memplan("simulate " + trace + " --policy " + bad);
    CHECK(r.exit_status == 2);
    check_one_line(r);
    CHECK(r.err.find("budget-partitioner=B takes activation_memory_budget B from 0 to 1") !=
          std::string::npos);
  }
  std::filesystem::remove(trace);
}

TEST_CASE(
    "simulate --alloc-conf expandable_segments:True: the step PyTorch's default fragments fits",
    "[cli][simulate][allocator]") {
  // The demo's ResNet-50 b32 with every map swapped needs 788,739,040 bytes live at most under
  // any allocator. On 28% of its in-core peak (870,560,902 bytes) PyTorch's default caching
  // allocator runs out: its segments, one cudaMalloc per block size class, hold holes no request
  // can use. With expandable segments the same requests tile one growing segment per pool and fit.
  // On 29% both fit.
  const std::string trace = "'" + source_path("traces/resnet50_b32_v100.json") + "'";
  const auto run = [&](const char* memory, const char* conf) {
    return run_memplan(
        fmt::format("simulate {} --policy swap-all --allocator caching --memory "
                    "{} {} --json",
                    trace, memory, conf));
  };
  const auto fragmented = run("28%", "");
  CHECK(fragmented.exit_status == 1);
  const auto expandable = run("28%", "--alloc-conf expandable_segments:True");
  REQUIRE(expandable.exit_status == 0);
  const auto roomy = run("29%", "");
  REQUIRE(roomy.exit_status == 0);
  const auto e = nlohmann::json::parse(expandable.out);
  const auto r = nlohmann::json::parse(roomy.out);
  CHECK(e.at("peak_bytes") == r.at("peak_bytes"));
  CHECK(e.at("peak_reserved_bytes").get<std::int64_t>() <
        r.at("peak_reserved_bytes").get<std::int64_t>());
  CHECK(e.at("machine").at("alloc_conf") == "expandable_segments:True");
  const auto text = run_memplan(
      fmt::format("simulate {} --policy swap-all --allocator caching --memory 28% --alloc-conf "
                  "expandable_segments:True",
                  trace));
  CHECK(text.out.find("(caching allocator, expandable_segments:True)") != std::string::npos);
  // The step under expandable segments as a snapshot: its pages' maps and unmaps written as c10
  // writes them (segment_map, segment_unmap; each run of mapped pages a segment at the dump, the
  // settings beside them). Read back and replayed through the model with those settings, every
  // allocation lands where the simulator put it and the reserved bytes agree after every event.
  const std::string dir = memplan::test::temp_dir();
  const std::string snapshot = dir + "/expandable.pickle";
  const auto written = run_memplan(
      fmt::format("simulate {} --policy swap-all --allocator caching --memory 28% --alloc-conf "
                  "expandable_segments:True --snapshot-out '{}'",
                  trace, snapshot));
  REQUIRE(written.exit_status == 0);
  const auto back = run_memplan(fmt::format("import snapshot '{}' --json", snapshot));
  REQUIRE(back.exit_status == 0);
  const auto j = nlohmann::json::parse(back.out);
  CHECK(j.at("allocator_settings").at("expandable_segments") == true);
  const auto& device = j.at("devices").at(0);
  CHECK(device.at("actions").at("segment_map").get<int>() > 0);
  CHECK_FALSE(device.at("actions").contains("segment_alloc"));
  CHECK(device.at("peak_reserved_bytes") == e.at("peak_reserved_bytes"));
  CHECK(device.at("peak_live_bytes") == e.at("peak_bytes"));
  const auto& model = device.at("model");
  CHECK(model.at("placed_as_recorded") == model.at("allocations"));
  CHECK(model.at("first_reserved_mismatch_event").is_null());
  CHECK(model.at("segments") == device.at("segments"));
  std::filesystem::remove_all(dir);
  // Under the arena, or on a backend (simulated only): one line, exit 2.
  for (const std::string& command :
       {fmt::format("simulate {} --policy swap-all --allocator arena --alloc-conf "
                    "expandable_segments:True",
                    trace),
        fmt::format("validate {} --policy swap-all --allocator caching --alloc-conf "
                    "max_split_size_mb:64",
                    source_path("traces/mlp4.json")),
        fmt::format("simulate {} --policy swap-all --allocator caching --alloc-conf "
                    "max_split_size_mb:8",
                    trace)}) {
    const auto refused = run_memplan(command);
    CHECK(refused.exit_status == 2);
    CHECK(refused.err.rfind("memplan: --alloc-conf", 0) == 0);
    CHECK(refused.err.find('\n') == refused.err.size() - 1);
  }
}
