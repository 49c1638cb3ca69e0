// `memplan validate --backend host`: the documented JSON keys with the peaks equal and the
// gradients matching for swap-all and recompute-all; bad input (unknown backend) is one line and
// exit 2; a plan the simulator says does not fit is one line and exit 1, as in `simulate`;
// --force runs it and reports the OOM. A flag the chosen backend has no use for is refused with
// one line and exit 2, never dropped (--backend torch's what-if flags act:
// tests/cli/capture_command_test.cpp).
#include <algorithm>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/basic_plans.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "io/input_stream.hpp"
#include "io/plan_io.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"
#ifdef MEMPLAN_WITH_CUDA_BACKEND
#include "cuda_backend/cuda_environment.hpp"
#endif

using memplan::test::run_memplan;
using memplan::test::source_path;

namespace {
std::string trace(const char* name) {
  return fmt::format("'{}'", source_path(fmt::format("traces/{}.json", name)));
}
}  // namespace

TEST_CASE("validate --json runs the plan and matches the in-core gradients", "[cli][validate]") {
  const char* name = GENERATE("mlp4", "resnet_tiny");
  const char* policy = GENERATE("swap-all", "recompute-all");
  CAPTURE(name, policy);
  const auto r = run_memplan(
      fmt::format("validate {} --policy {} --backend host --json", trace(name), policy));
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"peak_bytes_predicted", "peak_bytes_measured", "iteration_s_predicted",
                          "iteration_s_measured", "gradients_match", "max_abs_diff"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j["peak_bytes_predicted"].get<long long>() > 0);
  CHECK(j["peak_bytes_measured"] == j["peak_bytes_predicted"]);
  CHECK(j["peaks_match"] == true);
  CHECK(j["gradients_match"] == true);
  CHECK(j["comparison"] == "bitwise");
  CHECK(j["tolerance"].is_null());
  CHECK(j["bitwise_equal"] == true);
  CHECK(j["max_abs_diff"].get<double>() == 0.0);
  CHECK(j["iteration_s_measured"].get<double>() > 0.0);
  CHECK(j["tensors_compared"].get<int>() > 0);
}

TEST_CASE("validate --calibrate predicts with this host's costs", "[cli][validate]") {
  const auto r = run_memplan(
      fmt::format("validate {} --policy recompute-all --backend host --calibrate", trace("mlp4")));
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("measured on this host") != std::string::npos);
  CHECK(r.out.find("gradients match    yes") != std::string::npos);
}

TEST_CASE("validate --encode binarize runs Gist's encoding with in-core gradients",
          "[cli][validate]") {
  const auto r = run_memplan(
      fmt::format("validate {} --policy in-core --encode binarize --backend host --json",
                  trace("resnet_tiny")));
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["gradients_match"] == true);
  CHECK(j["peak_bytes_measured"] == j["peak_bytes_predicted"]);
}

TEST_CASE("validate --encode with precision reduction passes within the stated tolerance",
          "[cli][validate]") {
  const char* encode = GENERATE("fp16", "dpr", "fp10", "fp8", "all");
  const char* name = GENERATE("mlp4", "resnet_tiny");
  CAPTURE(encode, name);
  // resnet_tiny's int64 pool indices are a feature map: the plan must leave them alone.
  const auto r = run_memplan(fmt::format(
      "validate {} --policy in-core --encode {} --backend host --json", trace(name), encode));
  INFO(r.err);
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["peaks_match"] == true);
  CHECK(j["gradients_match"] == true);
  if (std::string(encode) == "all" && std::string(name) == "resnet_tiny") {
    // Its ReLU outputs take binarize or sparse (lossless); its other float maps (pool_out 512 B,
    // logits and probs 80 B) are one arena unit each, which narrowing would not shrink, so Gist
    // narrows none (search/policies/gist.cpp): the plan is lossless and compared bitwise.
    CHECK(j["comparison"] == "bitwise");
    CHECK(j["bitwise_equal"] == true);
    return;
  }
  CHECK(j["comparison"] == "tolerance");
  REQUIRE(j["tolerance"].is_object());
  const double relative = j["tolerance"]["relative"].get<double>();
  CHECK(j["tolerance"]["narrowed_maps"].get<int>() > 0);
  CHECK(relative == Approx(std::min(j["tolerance"]["factor"].get<double>() *
                                        j["tolerance"]["narrowed_maps"].get<int>() *
                                        j["tolerance"]["unit_roundoff"].get<double>(),
                                    j["tolerance"]["cap"].get<double>())));
  CHECK(relative < 1.0);  // a bound of 1 would pass a zero gradient
  CHECK(j["max_rel_diff"].get<double>() <= relative);
  CHECK(j["bitwise_equal"] == false);  // the narrowed maps do change the gradients
  CHECK(r.err.empty());
}

TEST_CASE("validate --encode sparse on resnet_tiny is bitwise at the predicted peak",
          "[cli][validate]") {
  const auto r = run_memplan(fmt::format(
      "validate {} --policy in-core --encode sparse --backend host --json", trace("resnet_tiny")));
  INFO(r.err);
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["policy"] == "in-core+gist");
  CHECK(j["comparison"] == "bitwise");
  CHECK(j["gradients_match"] == true);
  CHECK(j["bitwise_equal"] == true);
  CHECK(j["peaks_match"] == true);
  CHECK(j["peak_bytes_measured"] == j["peak_bytes_predicted"]);
}

TEST_CASE("validate refuses a plan made for another trace: one line, exit 2", "[cli][validate]") {
  const auto mlp = memplan::sim::read_trace(source_path("traces/mlp4.json"));
  const std::string plan = memplan::test::temp_dir() + "/mlp4_swap_all.plan.json";
  memplan::sim::write_file_atomically(
      plan, memplan::sim::write_plan(memplan::sim::swap_all_plan(mlp), mlp));
  const auto r = run_memplan(
      fmt::format("validate {} --plan '{}' --backend host", trace("resnet_tiny"), plan));
  CHECK(r.exit_status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("made for another workload") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("validate: bad input is exit 2, a plan that does not fit exit 1 (as simulate)",
          "[cli][validate]") {
  const auto unknown =
      run_memplan(fmt::format("validate {} --policy swap-all --backend tpu", trace("mlp4")));
  CHECK(unknown.exit_status == 2);
  CHECK(unknown.err.find("unknown backend 'tpu'") != std::string::npos);
  CHECK(unknown.err.find('\n') == unknown.err.size() - 1);

  const auto too_small = run_memplan(
      fmt::format("validate {} --policy swap-all --backend host --memory 200KiB", trace("mlp4")));
  CHECK(too_small.exit_status == 1);
  const auto simulated =
      run_memplan(fmt::format("simulate {} --policy swap-all --memory 200KiB", trace("mlp4")));
  CHECK(simulated.exit_status == too_small.exit_status);
  CHECK(too_small.err.find("does not fit") != std::string::npos);
  CHECK(too_small.err.find('\n') == too_small.err.size() - 1);

  const auto forced = run_memplan(fmt::format(
      "validate {} --policy swap-all --backend host --memory 200KiB --force", trace("mlp4")));
  CHECK(forced.exit_status == 1);
  CHECK(forced.err.find("ran out of device memory") != std::string::npos);
}

TEST_CASE("validate --backend cuda without a GPU is one clear line and exit 2", "[cli][validate]") {
  const auto r =
      run_memplan(fmt::format("validate {} --policy in-core --backend cuda", trace("mlp4")));
#ifdef MEMPLAN_WITH_CUDA_BACKEND
  const auto env = memplan::cuda_backend::probe_cuda();
  if (env.device_count > 0) {  // a GPU machine: the validation runs
    CHECK(r.exit_status == 0);
    CHECK(r.out.find("backend            cuda") != std::string::npos);
    CHECK(r.out.find("gradients match    yes") != std::string::npos);
    return;
  }
  CHECK(r.err.find("--backend cuda: no CUDA device: " + env.unavailable_reason) !=
        std::string::npos);
#else
  CHECK(r.err.find("this build has no CUDA backend") != std::string::npos);
#endif
  CHECK(r.exit_status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

TEST_CASE("validate refuses a trace with a layer the backend cannot run: one line, exit 2",
          "[cli][validate]") {
  // mlp4 with its first ReLU renamed to a layer type the host has no kernel for.
  std::string text = memplan::sim::read_file(source_path("traces/mlp4.json"));
  const std::string relu = "\"layer\":\"relu\"";
  const auto at = text.find(relu);
  REQUIRE(at != std::string::npos);
  text.replace(at, relu.size(), "\"layer\":\"swish\"");
  const std::string path = memplan::test::temp_dir() + "/mlp4_swish.json";
  memplan::sim::write_file_atomically(path, text);
  const auto r = run_memplan(fmt::format("validate '{}' --policy in-core --backend host", path));
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("no host kernel") != std::string::npos);
  CHECK(r.err.find("swish") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("validate reports a backend that fails while running: one line, exit 1",
          "[cli][validate]") {
  // mlp4 with its first linear op (2-d input and weight) renamed conv2d: the host's convolution
  // refuses the shapes at run time, a runtime::BackendError, not bad input.
  std::string text = memplan::sim::read_file(source_path("traces/mlp4.json"));
  const std::string linear = "\"name\":\"fc1\",\"layer\":\"linear\"";
  const auto at = text.find(linear);
  REQUIRE(at != std::string::npos);
  text.replace(at, linear.size(), "\"name\":\"fc1\",\"layer\":\"conv2d\"");
  const std::string path = memplan::test::temp_dir() + "/mlp4_conv_fc1.json";
  memplan::sim::write_file_atomically(path, text);
  const auto r = run_memplan(fmt::format("validate '{}' --policy in-core --backend host", path));
  CHECK(r.exit_status == 1);
  CHECK(r.err.find("backend failed") != std::string::npos);
  CHECK(r.err.find("op 'fc1' (conv2d, forward)") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("validate refuses a generic op (a layer with no rule): one line, exit 2",
          "[cli][validate]") {
  // A captured aten op keeps its name; the host has no kernel for it.
  std::string text = memplan::sim::read_file(source_path("traces/mlp4.json"));
  const std::string relu = "\"layer\":\"relu\"";
  const auto at = text.find(relu);
  REQUIRE(at != std::string::npos);
  text.replace(at, relu.size(), "\"layer\":\"aten::gelu\"");
  const std::string path = memplan::test::temp_dir() + "/mlp4_aten_gelu.json";
  memplan::sim::write_file_atomically(path, text);
  const auto r = run_memplan(fmt::format("validate '{}' --policy in-core --backend host", path));
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("(aten::gelu, forward)") != std::string::npos);
  CHECK(r.err.find("a generic op") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("validate refuses attention without the causal mask: one line, exit 2",
          "[cli][validate]") {
  // The zoo's vit_b16 marks its attention scores causal 0; the host's kernels always mask. A small
  // gpt with that mark: refused at its first attention op, before running it.
  const std::string path = memplan::test::temp_dir() + "/gpt_not_causal.json";
  REQUIRE(run_memplan(fmt::format("zoo gpt --batch 1 --layers 1 --hidden 16 --heads 2 --seq 8 "
                                  "--vocab 32 --device v100-16gb -o '{}'",
                                  path))
              .exit_status == 0);
  memplan::sim::Workload w = memplan::sim::read_trace(path);
  for (memplan::sim::Op& op : w.ops) {
    if (op.layer == memplan::sim::Layer::kAttentionScores) op.attributes["causal"] = {0};
  }
  memplan::sim::write_trace_file(w, path);
  const auto r = run_memplan(fmt::format("validate '{}' --policy in-core --backend host", path));
  CHECK(r.exit_status == 2);
  CHECK(r.err.find("op 'h.0.attn.scores' (attention_scores, forward)") != std::string::npos);
  CHECK(r.err.find("without the causal mask") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("validate refuses a flag its backend would ignore: one line naming it, exit 2",
          "[cli][validate]") {
  struct Case {
    const char* flags;
    const char* flag;
  };
  // --backend torch predicts with the op times the capture measured, captured on one GPU:
  // --calibrate and the interconnect's flags would change nothing. Refused before Python runs.
  const std::string torch = "--backend torch --model torchvision:resnet18 --policy swap-all";
  // The flags that rebuild a captured PyTorch model mean nothing to the host backend.
  const std::string host = "--backend host --policy swap-all";
  for (const auto& [flags, flag] :
       {Case{"--calibrate", "--calibrate"}, Case{"--interconnect nvlink4", "--interconnect"},
        Case{"--interconnect nvlink4 --network ib-ndr", "--interconnect"},
        Case{"--gpus-per-node 4", "--gpus-per-node"}}) {
    CAPTURE(flags);
    const auto r = run_memplan(fmt::format("validate {} {} {}", trace("mlp4"), torch, flags));
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(fmt::format("memplan: {}: ", flag)) == 0);
    CHECK(r.err.find("--backend torch") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  for (const auto& [flags, flag] :
       {Case{"--model torchvision:resnet18", "--model"}, Case{"--batch 4", "--batch"},
        Case{"--input 32x32", "--input"}, Case{"--optimizer adam", "--optimizer"},
        Case{"--compile inductor", "--compile"}}) {
    CAPTURE(flags);
    const auto r = run_memplan(fmt::format("validate {} {} {}", trace("mlp4"), host, flags));
    CHECK(r.exit_status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(fmt::format("memplan: {}: ", flag)) == 0);
    CHECK(r.err.find("only for --backend torch") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  // --no-host-check skips the CUDA backend's comparison with the host backend.
  for (const std::string& other : {host, torch}) {
    CAPTURE(other);
    const auto r = run_memplan(fmt::format("validate {} {} --no-host-check", trace("mlp4"), other));
    CHECK(r.exit_status == 2);
    CHECK(r.err.find("memplan: --no-host-check: ") == 0);
    CHECK(r.err.find("only for --backend cuda") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("validate --snapshot-out writes what the backend's allocator did as a PyTorch snapshot",
          "[cli][validate][snapshot]") {
  // #38 item 4 for a run for real: the host backend's allocator events, stamped with the host
  // clock as c10 stamps its own, read back by memplan's snapshot reader: the live bytes over the
  // trace peak at the peak the run measured, the times never go back, and the events are the
  // simulator's (`simulate --snapshot-out` of the same plan) call for call: the same actions at
  // the same addresses and sizes, naming the same buffers and ops.
  const std::string dir = memplan::test::temp_dir();
  for (const char* allocator : {"arena", "caching"}) {
    CAPTURE(allocator);
    const std::string measured = dir + "/" + allocator + ".pickle";
    const std::string predicted = dir + "/" + allocator + "-predicted.pickle";
    const std::string flags = fmt::format("{} --policy swap-all --allocator {} --memory 64MiB",
                                          trace("resnet_tiny"), allocator);
    const auto run =
        run_memplan(fmt::format("validate {} --json --snapshot-out '{}'", flags, measured));
    REQUIRE(run.exit_status == 0);
    REQUIRE(
        run_memplan(fmt::format("simulate {} --snapshot-out '{}'", flags, predicted)).exit_status ==
        0);
    const auto v = nlohmann::json::parse(run.out);
    const auto read = run_memplan("import snapshot '" + measured + "' --json");
    REQUIRE(read.exit_status == 0);
    const auto d = nlohmann::json::parse(read.out).at("devices").at(0);
    CHECK(d.at("peak_live_bytes") == v.at("peak_bytes_measured"));
    CHECK(d.at("peak_reserved_bytes") == v.at("peak_reserved_bytes_measured"));
    const auto m = memplan::importers::read_memory_snapshot(measured);
    const auto p = memplan::importers::read_memory_snapshot(predicted);
    REQUIRE(m.device_traces.size() == 1);
    REQUIRE(m.device_traces[0].size() == p.device_traces[0].size());
    double last = 0;
    for (std::size_t i = 0; i < m.device_traces[0].size(); ++i) {
      const auto& e = m.device_traces[0][i];
      const auto& want = p.device_traces[0][i];
      REQUIRE(e.time_us);
      CHECK(*e.time_us >= last);
      last = *e.time_us;
      CHECK(e.action == want.action);
      CHECK(e.address == want.address);
      CHECK(e.size == want.size);
      REQUIRE(e.frames.size() == want.frames.size());
      for (std::size_t f = 0; f < e.frames.size(); ++f) {
        CHECK(e.frames[f].name == want.frames[f].name);
      }
    }
  }
  // No file after an out-of-memory stop, for --backend torch (which measures saved tensors, not
  // an allocator), or on standard output (the report goes there).
  const std::string none = dir + "/none.pickle";
  const auto oom = run_memplan(
      fmt::format("validate {} --policy swap-all --memory 200KiB --force --snapshot-out '{}'",
                  trace("mlp4"), none));
  CHECK(oom.exit_status == 1);
  CHECK_FALSE(std::filesystem::exists(none));
  for (const std::string& flags :
       {fmt::format("--backend torch --model m --snapshot-out '{}'", none),
        std::string("--snapshot-out -")}) {
    const auto refused =
        run_memplan(fmt::format("validate {} --policy swap-all {}", trace("mlp4"), flags));
    CHECK(refused.exit_status == 2);
    CHECK(refused.err.find("--snapshot-out") != std::string::npos);
    CHECK(refused.err.find('\n') == refused.err.size() - 1);
  }
  CHECK_FALSE(std::filesystem::exists(none));
  std::filesystem::remove_all(dir);
}
