// `memplan capture`: the thin command that runs python3 -m memplan.torch from the source tree's
// python/ beside the build tree; a captured trace is read back by `memplan info`; bad input is
// one line and exit 2 with no file written.
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/core.h>
#include <catch2/catch.hpp>

#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::temp_dir;

namespace {

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("capture writes a trace of a torchvision model that info reads", "[cli][capture]") {
  if (!python_has_torch()) {
    WARN("skipped: /usr/bin/python3 has no torch/torchvision (scripts/setup installs them)");
    return;
  }
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
  if (!python_has_torch()) {
    WARN("skipped: /usr/bin/python3 has no torch/torchvision (scripts/setup installs them)");
    return;
  }
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
