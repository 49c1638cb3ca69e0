// `memplan capture`: the thin command that runs python3 -m memplan.torch from the Python package
// the build lays out beside its binary (build/PRESET/python); a captured trace is read back by
// `memplan info`; bad input is one line and exit 2 with no file written; `validate --backend torch`
// runs a plan on the model, predicted on the machine its what-if flags describe (each flag acts:
// --link, --h2d, --d2h, --latency, --allocator, --memory, --host-memory, --encode, --force).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/core.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::temp_dir;

namespace {

// Whether capture can run here: this build has the Python package (sanitizer builds do not: an
// instrumented extension does not load into python3) and python3 has torch and torchvision.
bool capture_can_run() {
#ifdef MEMPLAN_NO_PYTHON_PACKAGE
  WARN("skipped: this build has no memplan Python package (sanitizer builds skip it)");
  return false;
#else
  if (std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0) {
    return true;
  }
  WARN("skipped: /usr/bin/python3 has no torch/torchvision (scripts/setup installs them)");
  return false;
#endif
}

// The model every validate test below runs, and a trace of it captured once per test process.
constexpr const char* kResnet18 = "--model torchvision:resnet18 --batch 2 --input 32x32";

const std::string& resnet18_capture() {
  static const std::string path = [] {
    std::string out = temp_dir() + "/capture_for_validate.json";
    const auto r = run_memplan(
        fmt::format("capture torchvision:resnet18 --batch 2 --input 32x32 -o '{}'", out));
    INFO(r.err);
    REQUIRE(r.exit_status == 0);
    return out;
  }();
  return path;
}

// `memplan validate TRACE --backend torch` of resnet18 with `flags`, parsed from --json.
nlohmann::json validate_json(const std::string& flags) {
  const auto r = run_memplan(fmt::format("validate '{}' --backend torch {} {} --json",
                                         resnet18_capture(), kResnet18, flags));
  INFO(flags << "\n" << r.err);
  REQUIRE(r.exit_status == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("capture writes a trace of a torchvision model that info reads", "[cli][capture]") {
  if (!capture_can_run()) return;
  const std::string out = temp_dir() + "/capture_resnet18.json";
  const auto r = run_memplan(fmt::format(
      "capture torchvision:resnet18 --batch 2 --input 32x32 --optimizer adam -o '{}'", out));
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("captured torchvision:resnet18") != std::string::npos);
  const auto info = run_memplan(fmt::format("info '{}'", out));
  CHECK(info.exit_status == 0);
  CHECK(info.out.find("provenance   recorded") != std::string::npos);
}

TEST_CASE("capture: bad input is one line and exit 2, nothing written",
          "[cli][capture][bad_input]") {
  if (!capture_can_run()) return;
  const std::string dir = temp_dir();
  const std::string out = dir + "/bad_capture.json";
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {Case{"torchvision:no_such_net", "torchvision has no model 'no_such_net'"},
                        Case{"torchvision:resnet18 --input 7", "an image model takes HxW"},
                        Case{"torchvision:resnet18 --device tpu", "tpu not in {cpu,cuda}"},
                        Case{"torchvision:resnet18 --batch 0", "--batch"},
                        Case{"torchvision:resnet18 --step no_such_module:step",
                             "--step: cannot import 'no_such_module'"},
                        // PyTorch 2: no such backend; 1.13: no torch.compile at all
                        Case{"torchvision:resnet18 --compile no_such_backend",
                             "--compile no_such_backend: torch.compile"}}) {
    CAPTURE(c.args);
    const auto r = run_memplan(fmt::format("capture {} -o '{}'", c.args, out));
    CHECK(r.exit_status == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!std::filesystem::exists(out));
  }
}

TEST_CASE("validate --backend torch runs a plan on the captured model",
          "[cli][capture][validate]") {
  if (!capture_can_run()) return;
  const std::string& trace = resnet18_capture();
  const std::string flags = "--backend torch --model torchvision:resnet18 --batch 2";
  const auto r = run_memplan(fmt::format(
      "validate '{}' {} --input 32x32 --policy recompute-all --memory 1GiB", trace, flags));
  CHECK(r.exit_status == 0);
  CHECK(r.out.find("bitwise            loss True, gradients True, updated weights True") !=
        std::string::npos);
  // The same model at another input shape: refused with one line.
  const auto other = run_memplan(fmt::format(
      "validate '{}' {} --input 64x64 --policy recompute-all --memory 1GiB", trace, flags));
  CHECK(other.exit_status == 2);
  CHECK(other.err.find("another input shape") != std::string::npos);
  CHECK(std::count(other.err.begin(), other.err.end(), '\n') == 1);
  const auto no_model =
      run_memplan(fmt::format("validate '{}' --backend torch --policy dtr", trace));
  CHECK(no_model.exit_status == 2);
  CHECK(no_model.err.find("needs --model") != std::string::npos);
}

TEST_CASE("validate --backend torch predicts on the machine its what-if flags describe",
          "[cli][capture][validate]") {
  if (!capture_can_run()) return;
  // swap-all copies every map out and back: the copy link is on the prediction's critical path.
  const auto pcie3 = validate_json("--policy swap-all --link pcie3");
  const auto nvlink2 = validate_json("--policy swap-all --link nvlink2");
  CHECK(pcie3["machine"]["h2d_bytes_per_s"].get<double>() == 16e9);
  CHECK(nvlink2["machine"]["h2d_bytes_per_s"].get<double>() == 75e9);
  CHECK(nvlink2["machine"]["copy_latency_ns"].get<long long>() == 5000);
  CHECK(pcie3["predicted_seconds"].get<double>() > nvlink2["predicted_seconds"].get<double>());
  // Single values over the preset, and the allocator model.
  const auto slow = validate_json(
      "--policy swap-all --link nvlink2 --h2d 1GB/s --d2h 2GB/s --latency 40us --allocator "
      "caching");
  CHECK(slow["machine"]["h2d_bytes_per_s"].get<double>() == 1e9);
  CHECK(slow["machine"]["d2h_bytes_per_s"].get<double>() == 2e9);
  CHECK(slow["machine"]["copy_latency_ns"].get<long long>() == 40000);
  CHECK(slow["machine"]["allocator"] == "caching");
  CHECK(slow["predicted_seconds"].get<double>() > pcie3["predicted_seconds"].get<double>());
  // The measured side does not depend on the machine: the same peaks, bitwise results.
  for (const auto* j : {&pcie3, &nvlink2, &slow}) {
    CHECK((*j)["within_tolerance"] == true);
    CHECK((*j)["peaks_match"] == true);
  }
  // --encode narrows the kept maps of the policy's plan. Whether fp16 on all 60 kept maps of this
  // tiny step stays within the first-order tolerance depends on the data (batch 2 at 32x32 ends
  // in batch norms over two values, which amplify rounding): on the capture's weights and batch
  // the gradients' relative error is 0.166 against 0.117, exit 1 with the report (on seed 1's,
  // which validate used to rebuild, 0.096).
  const auto r =
      run_memplan(fmt::format("validate '{}' --backend torch {} --policy in-core "
                              "--encode fp16 --json",
                              resnet18_capture(), kResnet18));
  INFO(r.err);
  REQUIRE(r.exit_status <= 1);
  const auto fp16 = nlohmann::json::parse(r.out);
  CHECK(fp16["comparison"] == "tolerance");
  CHECK(fp16["narrowed_maps"].get<int>() > 0);
  CHECK(fp16["peaks_match"] == true);
  CHECK(fp16["within_tolerance"].get<bool>() == (r.exit_status == 0));
}

TEST_CASE("validate --backend torch: a plan that does not fit the machine is exit 1 unless --force",
          "[cli][capture][validate]") {
  if (!capture_can_run()) return;
  const std::string run = fmt::format("validate '{}' --backend torch {} --policy swap-all",
                                      resnet18_capture(), kResnet18);
  // --memory: the device memory the prediction has; --host-memory: the pinned host memory that
  // holds the swapped maps.
  for (const char* machine : {"--memory 1MiB", "--host-memory 1KiB"}) {
    CAPTURE(machine);
    const auto r = run_memplan(fmt::format("{} {}", run, machine));
    CHECK(r.exit_status == 1);
    CHECK(r.err.find("the simulator says the plan does not fit (--force runs it)") !=
          std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
  const auto forced = run_memplan(fmt::format("{} --memory 1MiB --force", run));
  INFO(forced.err);
  CHECK(forced.exit_status == 0);
  CHECK(forced.out.find("predicted: does not fit") != std::string::npos);
  CHECK(forced.out.find("bitwise            loss True, gradients True, updated weights True") !=
        std::string::npos);
}
