// PYTORCH_CUDA_ALLOC_CONF as memplan reads it (`--alloc-conf`, core/allocator_model.hpp): each
// option as c10's CUDAAllocatorConfig parses and checks it, and a machine takes it only with the
// caching allocator.
#include <string>

#include <catch2/catch.hpp>

#include "core/allocator_model.hpp"
#include "core/input_error.hpp"
#include "core/machine.hpp"

using namespace memplan::sim;

namespace {
constexpr std::int64_t kMiB = std::int64_t{1} << 20;

std::string refusal(const std::string& text) {
  try {
    (void)parse_alloc_conf(text, "--alloc-conf");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("an allocator configuration reads as c10 reads PYTORCH_CUDA_ALLOC_CONF",
          "[sim][allocator]") {
  CHECK(parse_alloc_conf("", "--alloc-conf") == AllocatorConfig{});
  const AllocatorConfig c = parse_alloc_conf(
      "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
      "pinned_use_cuda_host_register:True",
      "--alloc-conf");
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size == 128 * kMiB);
  CHECK(c.garbage_collection_threshold == 0.6);
  CHECK(to_string(c) ==
        "expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6");
  // One number: every interval. A list keyed by MiB: the first entry also below it, ">" every
  // interval after the last entry (256 MiB is interval 8, 512 MiB 9).
  const auto all = parse_alloc_conf("roundup_power2_divisions:4", "--alloc-conf");
  for (const std::int64_t d : all.roundup_power2_divisions) CHECK(d == 4);
  const auto list = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:8]", "--alloc-conf");
  for (std::size_t i = 0; i < 8; ++i) CHECK(list.roundup_power2_divisions[i] == 1);
  CHECK(list.roundup_power2_divisions[8] == 1);
  CHECK(list.roundup_power2_divisions[9] == 2);
  for (std::size_t i = 10; i < 16; ++i) CHECK(list.roundup_power2_divisions[i] == 8);
  CHECK(parse_alloc_conf("expandable_segments:False", "--alloc-conf") == AllocatorConfig{});
}

TEST_CASE("an allocator configuration c10 would refuse is refused in one line naming the flag",
          "[sim][allocator]") {
  CHECK(refusal("max_split_size_mb:20").find("too small") != std::string::npos);  // c10: > 20
  CHECK(refusal("max_split_size_mb:lots").find("not a whole number") != std::string::npos);
  CHECK(refusal("roundup_power2_divisions:3").find("not a power of two") != std::string::npos);
  CHECK(refusal("roundup_power2_divisions:[300:2]").find("not a power of two") !=
        std::string::npos);
  CHECK(refusal("roundup_power2_divisions:[256:2").find("closing ]") != std::string::npos);
  CHECK(refusal("garbage_collection_threshold:1").find("between 0 and 1") != std::string::npos);
  CHECK(refusal("expandable_segments:yes").find("True or False") != std::string::npos);
  CHECK(refusal("backend:cudaMallocAsync").find("native") != std::string::npos);
  CHECK(refusal("expandable").find("key:value") != std::string::npos);
  CHECK(refusal("no_such_option:1").find("not a caching-allocator option") != std::string::npos);
  CHECK(refusal("expandable_segments:yes").rfind("--alloc-conf", 0) == 0);
}

TEST_CASE("a machine takes an allocator configuration with the caching allocator only",
          "[sim][allocator]") {
  DeviceInfo device;
  device.memory_bytes = 16 * (std::int64_t{1} << 30);
  MachineOverrides o;
  o.allocator_config = parse_alloc_conf("expandable_segments:True", "--alloc-conf");
  CHECK_THROWS_WITH(make_machine(device, o), Catch::Contains("add --allocator caching"));
  o.allocator = AllocatorModel::kCaching;
  CHECK(make_machine(device, o).allocator_config.expandable_segments);
  device.allocator = AllocatorModel::kCaching;  // a trace recorded from PyTorch: no flag needed
  o.allocator.reset();
  CHECK(make_machine(device, o).allocator_config.expandable_segments);
}
