#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "io/plan_io.hpp"
#include "io/trace_io.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/io/bad_plans.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/workload_builder.hpp"

using namespace memplan::sim;
using memplan::test::plan_text;

namespace {
Workload resnet_tiny() {
  return read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
}
}  // namespace

TEST_CASE("a plan file names maps by name or id, maps left out are kept", "[sim][plan]") {
  const Workload w = resnet_tiny();
  const Plan plan = parse_plan(
      plan_text(w, R"([{"tensor":"relu1_out","action":"swap","prefetch_before":"conv2_bwd",
                        "release_before":"pool"},
                       {"tensor":13,"action":"encode:sparse"},
                       {"tensor":"relu3_out","action":"encode:binarize"},
                       {"tensor":"probs","action":"recompute"}])"),
      "p.json", w);
  REQUIRE(plan.decisions.size() == 6);
  CHECK(plan.policy == "test");
  CHECK(plan.decisions[0] ==
        Decision{TensorId{11}, Action::kSwap, Encoding::kNone, OpId{16}, OpId{7}});
  CHECK(plan.decisions[1] == Decision{TensorId{13}, Action::kEncode, Encoding::kSparse, kNoOp});
  CHECK(plan.decisions[2] == Decision{TensorId{16}, Action::kEncode, Encoding::kBinarize, kNoOp});
  // pool_out and pool_indices: left out. (Recomputing either would re-run the max-pool on
  // relu3_out's 1-bit mask, and recomputing probs re-runs fc, so pool_out may not be narrowed:
  // validate_plan refuses both.)
  CHECK(plan.decisions[3] == Decision{TensorId{17}, Action::kKeep, Encoding::kNone, kNoOp});
  CHECK(plan.decisions[4] == Decision{TensorId{18}, Action::kKeep, Encoding::kNone, kNoOp});
  CHECK(plan.decisions[5] == Decision{TensorId{21}, Action::kRecompute, Encoding::kNone, kNoOp});
  CHECK(plan.action_counts() == std::array<std::size_t, kActionCount>{2, 1, 1, 2});
  // Write -> read -> write is stable.
  const std::string text = write_plan(plan, w);
  const Plan again = parse_plan(text, "again.json", w);
  CHECK(again == plan);
  CHECK(write_plan(again, w) == text);
}

TEST_CASE("the fingerprint covers structure, not durations", "[sim][plan]") {
  Workload w = resnet_tiny();
  const auto fp = workload_fingerprint(w);
  w.ops[3].duration_ns += 100;
  CHECK(workload_fingerprint(w) == fp);
  w.tensors[11].bytes += 4;
  CHECK(workload_fingerprint(w) != fp);
  const Workload mlp = read_trace(memplan::test::source_path("traces/mlp4.json"));
  CHECK(workload_fingerprint(mlp) != fp);
  // A plan for mlp4 is refused on resnet_tiny.
  CHECK_THROWS_WITH(parse_plan(write_plan(swap_all_plan(mlp), mlp), "mlp.json", resnet_tiny()),
                    Catch::Contains("made for another workload"));
}

TEST_CASE("encoded sizes follow the Gist schemes", "[sim][plan]") {
  Tensor t;
  t.bytes = 3200;
  t.dtype = "float32";
  CHECK(encoded_bytes(Encoding::kBinarize, t) == 100);
  CHECK(encoded_bytes(Encoding::kFp16, t) == 1600);
  CHECK(encoded_bytes(Encoding::kFp10, t) == 1000);
  CHECK(encoded_bytes(Encoding::kFp8, t) == 800);
  // 800 elements in 4 blocks of up to 256 (a 2-byte count each), half of them stored as a
  // 1-byte index and a 4-byte value: Note [Sparse format].
  CHECK(encoded_bytes(Encoding::kSparse, t) == 4 * 2 + 400 * 5);
  CHECK(encoded_bytes(Encoding::kSparse, t) ==
        sparse_format_bytes(800, sparse_planned_values(800)));
  t.bytes = 4 * 257;  // 257 values: 2 blocks, ceil(128.5) = 129 stored
  CHECK(encoded_bytes(Encoding::kSparse, t) == 2 * 2 + 129 * 5);
  CHECK(encoded_bytes(Encoding::kFp10, t) == (257 * 10 + 7) / 8);
  CHECK(encoded_bytes(Encoding::kBinarize, t) == 33);
}

TEST_CASE("only float32 maps take an encoding", "[sim][plan]") {
  const Workload w = resnet_tiny();
  const auto maps = find_feature_maps(w);
  const auto indices = std::find_if(maps.begin(), maps.end(), [&](const FeatureMap& m) {
    return w.tensor(m.tensor).name == "pool_indices";
  });
  REQUIRE(indices != maps.end());
  REQUIRE(w.tensor(indices->tensor).dtype == "int64");
  for (Encoding e :
       {Encoding::kFp16, Encoding::kFp10, Encoding::kFp8, Encoding::kSparse, Encoding::kBinarize}) {
    CAPTURE(to_string(e));
    const Decision d{indices->tensor, Action::kEncode, e, kNoOp};
    CHECK_THAT(decision_problem(d, *indices, w), Catch::Contains("needs a float32 map"));
  }
  // The other actions stay open to it, and a float32 map of the same trace may be narrowed.
  CHECK(decision_problem({indices->tensor, Action::kSwap, Encoding::kNone, kNoOp}, *indices, w)
            .empty());
  const auto pool_out = std::find_if(maps.begin(), maps.end(), [&](const FeatureMap& m) {
    return w.tensor(m.tensor).name == "pool_out";
  });
  REQUIRE(pool_out != maps.end());
  CHECK(decision_problem({pool_out->tensor, Action::kEncode, Encoding::kFp8, kNoOp}, *pool_out, w)
            .empty());
  // A plan file asking for it is refused, naming the file and the map.
  CHECK_THROWS_WITH(
      parse_plan(plan_text(w, R"([{"tensor":"pool_indices","action":"encode:fp16"}])"), "p.json",
                 w),
      Catch::Contains("p.json") && Catch::Contains("tensor 'pool_indices': encode:fp16 needs a "
                                                   "float32 map, this one is int64"));
}

TEST_CASE("bad plans are input errors naming the file and the problem", "[sim][plan][bad_input]") {
  const Workload w = resnet_tiny();
  for (const auto& bad : memplan::test::bad_plans(w)) {
    CAPTURE(bad.name);
    try {
      (void)parse_plan(bad.text, "bad.json", w);
      FAIL("accepted");
    } catch (const InputError& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(message.rfind("bad.json", 0) == 0);
      CHECK(message.find(bad.problem) != std::string::npos);
    }
  }
}

TEST_CASE("recompute is refused when regeneration would need a backward tensor",
          "[sim][plan][bad_input]") {
  // A (contrived but valid) trace where a forward op reads a gradient: f2_out cannot be rebuilt.
  memplan::test::WorkloadBuilder b;
  const auto x = b.input("x", 100);
  const auto a = b.forward("f1", {x}, 100, 10);
  const auto ga = b.backward("early_bwd", {a}, 100, 10);
  const auto c = b.forward("f2", {ga}, 100, 10);
  b.backward("g", {c, a}, 100, 10);
  const Workload w = b.build();
  CHECK_THROWS_WITH(
      parse_plan(plan_text(w, R"([{"tensor":"f2_out","action":"recompute"}])"), "p.json", w),
      Catch::Contains("tensor 'f2_out' cannot be recomputed"));
  // recompute-all keeps what it cannot recompute, and its plan lowers and runs.
  const Plan all = recompute_all_plan(w);
  CHECK(all.action_counts() == std::array<std::size_t, kActionCount>{1, 0, 1, 0});
  CHECK_NOTHROW(validate_plan(all, w, "recompute-all"));
  // f1_out is fine: x is an input.
  CHECK_NOTHROW(
      parse_plan(plan_text(w, R"([{"tensor":"f1_out","action":"recompute"}])"), "p.json", w));
}

TEST_CASE("a plan can run ops with an alternative algorithm, it round-trips and is priced",
          "[sim][plan]") {
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  Plan plan = in_core_plan(w);
  plan.algorithms = {{OpId{2}, 0}, {OpId{16}, 0}};  // conv2 and conv2_bwd with "memory_optimal"
  validate_plan(plan, w, "test");
  const std::string text = write_plan(plan, w);
  CHECK(text.find(R"({"op":"conv2","algorithm":"memory_optimal"})") != std::string::npos);
  CHECK(parse_plan(text, "written", w) == plan);
  // memory_optimal: no workspace, conv2 7000 ns instead of 5000, conv2_bwd 14000 instead of 10000.
  Lowerer lowerer(w);
  Program program;
  lowerer.lower(plan, program);
  CHECK(program.op_compute_ns == 55100 + 2000 + 4000);
  Engine engine;
  Machine machine;
  machine.memory_bytes = Bytes{1} << 30;
  const Timeline& t = engine.run(program, machine);
  CHECK(t.iteration_ns == 61100);
  // The in-core peak (25824) was at conv2_bwd with its 4096-byte workspace; without it the peak
  // moves to relu2_bwd: weights+momentum 8288, x 1536, relu1 and relu2 buffers 4096, g_fc 2560,
  // d_add1_out 2048, d_relu2_out 2048, g_conv3 576, d_conv2_out 2048 = 23200.
  CHECK(t.peak_bytes == 23200);
  Plan bad = plan;
  bad.algorithms = {{OpId{0}, 0}};  // conv1 has no alternative
  CHECK_THROWS_WITH(validate_plan(bad, w, "p.json"),
                    Catch::Contains("$.algorithms[0]") && Catch::Contains("no alternative"));
  CHECK_THROWS_WITH(
      parse_plan(R"({"format":"memplan-plan","version":1,"workload":{"fingerprint":")" +
                     fmt::format("{:016x}", workload_fingerprint(w)) +
                     R"("},"maps":[],"algorithms":[{"op":"conv2","algorithm":"winograd"}]})",
                 "p.json", w),
      Catch::Contains("$.algorithms[0].algorithm") && Catch::Contains("no algorithm 'winograd'"));
}

TEST_CASE("a binarized map whose max-pool is re-run by a recompute is refused", "[sim][plan]") {
  // resnet_tiny: relu3_out feeds the max-pool; recomputing pool_out would re-run the pool on the
  // decoded 1-bit mask.
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  Plan plan = in_core_plan(w);
  for (Decision& d : plan.decisions) {
    if (w.tensor(d.tensor).name == "relu3_out") {
      d.action = Action::kEncode;
      d.encoding = Encoding::kBinarize;
    }
  }
  CHECK_NOTHROW(validate_plan(plan, w, "p.json"));
  for (Decision& d : plan.decisions) {
    if (w.tensor(d.tensor).name == "pool_out") d.action = Action::kRecompute;
  }
  CHECK_THROWS_WITH(
      validate_plan(plan, w, "p.json"),
      Catch::Contains("'relu3_out' cannot be binarized") && Catch::Contains("'pool'"));
}

TEST_CASE("a narrowed map whose forward consumer a recompute re-runs is refused", "[sim][plan]") {
  // resnet_tiny: relu3_out feeds the max-pool; recomputing pool_indices re-runs the pool, which
  // would pick its indices among relu3_out's rounded values.
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  for (const char* scheme : {"fp16", "fp10", "fp8"}) {
    CAPTURE(scheme);
    const std::string narrowed =
        fmt::format(R"({{"tensor":"relu3_out","action":"encode:{}"}})", scheme);
    CHECK_NOTHROW(parse_plan(plan_text(w, "[" + narrowed + "]"), "p.json", w));
    CHECK_THROWS_WITH(
        parse_plan(
            plan_text(w, "[" + narrowed + R"(,{"tensor":"pool_indices","action":"recompute"}])"),
            "p.json", w),
        Catch::Contains(fmt::format("'relu3_out' cannot be narrowed to {}", scheme)) &&
            Catch::Contains("'pool'") && Catch::Contains("rounded values"));
  }
  // Recomputing relu3_out re-runs relu3, add1 (add1_out is not a feature map) and conv3
  // (conv3_out neither), which read relu1_out and relu2_out: sparse (lossless) is fine there, a
  // narrowed relu1_out is not.
  const Plan sparse = parse_plan(plan_text(w, R"([{"tensor":"relu2_out","action":"encode:sparse"},
                                                  {"tensor":"relu3_out","action":"recompute"}])"),
                                 "p.json", w);
  const std::vector<bool> rerun = ops_rerun_by_recompute(sparse, w);
  CHECK(rerun == std::vector<bool>{false, false, false, false, true,  true,  true,
                                   false, false, false, false, false, false, false,
                                   false, false, false, false, false, false, false});
  CHECK_THROWS_WITH(
      parse_plan(plan_text(w, R"([{"tensor":"relu1_out","action":"encode:fp16"},
                                                {"tensor":"relu3_out","action":"recompute"}])"),
                 "p.json", w),
      Catch::Contains("'relu1_out' cannot be narrowed to fp16") && Catch::Contains("'add1'"));
}

TEST_CASE("a job plan file holds each rank's plan, a plan file gives every rank the same",
          "[sim][plan][job]") {
  const Job job = memplan::test::late_gather_job();
  const std::string dir = memplan::test::temp_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  };
  // Rank 0 swaps every map, rank 1 recomputes every one: read back as written, rank by rank.
  const std::vector<Plan> plans = {swap_all_plan(job.ranks[0]), recompute_all_plan(job.ranks[1])};
  const std::string text = write_job_plan(plans, job);
  const std::string path = write("job_plan.json", text);
  CHECK(read_job_plans(path, job) == plans);
  CHECK(write_job_plan(read_job_plans(path, job), job) == text);  // stable
  // A plan file: the same plan for every rank, validated against each.
  const std::string one = write("plan.json", write_plan(plans[0], job.ranks[0]));
  CHECK(read_job_plans(one, job) == std::vector<Plan>{plans[0], plans[0]});
  // A job plan file where one rank's plan is expected says so.
  CHECK_THROWS_WITH(read_plan(path, job.ranks[0]),
                    path +
                        ": $.format: a job's plans, one per rank: give them with the job's "
                        "trace");
  // Ranks that are not the job's, in number or in order.
  nlohmann::json j = nlohmann::json::parse(text);
  j["ranks"].erase(1);
  CHECK_THROWS_WITH(read_job_plans(write("short.json", j.dump()), job),
                    Catch::EndsWith("$.ranks: 1 plans for a job of 2 ranks"));
  j = nlohmann::json::parse(text);
  std::swap(j["ranks"][0], j["ranks"][1]);
  CHECK_THROWS_WITH(
      read_job_plans(write("swapped.json", j.dump()), job),
      Catch::EndsWith("$.ranks[0].rank: expected rank 0 (the job's ranks, in order)"));
  // A rank's plan that is not its workload's is refused where it is.
  j = nlohmann::json::parse(text);
  j["ranks"][1]["plan"]["maps"][0]["action"] = "fly";
  CHECK_THROWS_WITH(
      read_job_plans(write("bad.json", j.dump()), job),
      Catch::StartsWith(dir + "/bad.json: ranks[1].plan: $.maps[0].action: unknown action 'fly'"));
}
