#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/machine.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using memplan::test::source_path;

TEST_CASE("read -> write -> read gives the same workload and the same bytes", "[sim][trace_io]") {
  for (const char* name : {"traces/mlp4.json", "traces/resnet_tiny.json"}) {
    CAPTURE(name);
    const Workload first = read_trace(source_path(name));
    const std::string text = write_trace(first);
    const Workload second = parse_trace(text, "<written>");
    CHECK(second == first);
    CHECK(write_trace(second) == text);
  }
}

TEST_CASE("write_trace_file replaces the file atomically and leaves no temporary",
          "[sim][trace_io]") {
  const Workload w = read_trace(source_path("traces/mlp4.json"));
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  const auto path = dir / "out.json";
  write_trace_file(w, path);
  CHECK(read_trace(path) == w);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 1);
  CHECK_THROWS_AS(write_trace_file(w, dir / "missing-dir" / "out.json"), InputError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("optional fields survive the round trip", "[sim][trace_io]") {
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const Op& conv2 = w.op(OpId{2});
  REQUIRE(conv2.algorithms.size() == 1);
  CHECK(conv2.algorithms[0].name == "memory_optimal");
  CHECK(conv2.algorithms[0].duration_ns == 7000);
  CHECK(w.tensor(TensorId{11}).in_place_of == TensorId{10});
  CHECK(w.device.link.latency_ns == 10000);
  CHECK(w.op(OpId{16}).differentiates == OpId{2});
  CHECK(conv2.attributes.at("stride") == std::vector<double>{1, 1});
  CHECK(conv2.attributes.at("groups") == std::vector<double>{1});
  CHECK(write_trace(w).find(
            R"("attributes":{"groups":1,"kernel":[3,3],"padding":[1,1],"stride":[1,1]})") !=
        std::string::npos);
  CHECK_FALSE(w.device.host_bandwidth_bytes_per_s.has_value());
  Workload measured = w;
  measured.device.host_bandwidth_bytes_per_s = 12.5e9;  // a recording's host-op speed
  CHECK(parse_trace(write_trace(measured), "t.json").device.host_bandwidth_bytes_per_s == 12.5e9);
  // The host side (format v2), a synchronizing op's host time before its wait included.
  Workload hosted = w;
  for (Op& op : hosted.ops) op.host = HostSide{.dispatch_ns = 7000};
  hosted.ops[3].host = HostSide{.dispatch_ns = 100, .synchronizes = true, .sync_after_ns = 2500};
  const Workload back = parse_trace(write_trace(hosted), "t.json");
  CHECK(back.ops[3].host == hosted.ops[3].host);
  CHECK(back.ops[4].host == hosted.ops[4].host);
}

TEST_CASE("the device's allocator model is read, written and made the machine's",
          "[sim][trace_io][allocator]") {
  Workload w = read_trace(source_path("traces/mlp4.json"));
  CHECK_FALSE(w.device.allocator.has_value());
  CHECK(make_machine(w.device).allocator == AllocatorModel::kArena);
  w.device.allocator = AllocatorModel::kCaching;
  const std::string text = write_trace(w);
  CHECK(text.find(R"("allocator":"caching")") != std::string::npos);
  const Workload back = parse_trace(text, "<written>");
  CHECK(back == w);
  CHECK(make_machine(back.device).allocator == AllocatorModel::kCaching);
  MachineOverrides flag;
  flag.allocator = AllocatorModel::kArena;
  CHECK(make_machine(back.device, flag).allocator == AllocatorModel::kArena);
}
