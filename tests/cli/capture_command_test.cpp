// `memplan capture`: the thin command that runs python3 -m memplan.torch from the Python package
// the build lays out beside its binary (build/PRESET/python); a captured trace is read back by
// `memplan info`; bad input is one line and exit 2 with no file written; `validate --backend torch`
// runs a plan on the model.
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/core.h>
#include <catch2/catch.hpp>

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
                        Case{"torchvision:resnet18 --batch 0", "--batch"}}) {
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
  const std::string trace = temp_dir() + "/capture_for_validate.json";
  const std::string model = "torchvision:resnet18 --batch 2 --input 32x32";
  REQUIRE(run_memplan(fmt::format("capture {} -o '{}'", model, trace)).exit_status == 0);
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
