#include <iterator>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/machine.hpp"

using namespace memplan::sim;

TEST_CASE("link presets carry the documented bandwidths and latencies", "[sim][machine]") {
  // Bandwidths per direction from ARCHITECTURE.md; latencies are the per-copy costs
  // core/machine.cpp states (the zoo's devices take both from here).
  const struct {
    const char* name;
    double bytes_per_s;
    Nanoseconds latency_ns;
  } expected[] = {{"pcie3", 16e9, 10'000},
                  {"pcie4", 32e9, 8'000},
                  {"pcie5", 64e9, 6'000},
                  {"nvlink2", 75e9, 5'000},
                  {"c2c", 450e9, 2'000}};
  REQUIRE(link_presets().size() == std::size(expected));
  for (const auto& e : expected) {
    CAPTURE(e.name);
    const auto preset = find_link_preset(e.name);
    REQUIRE(preset);
    CHECK(preset->link.h2d_bytes_per_s == e.bytes_per_s);
    CHECK(preset->link.d2h_bytes_per_s == e.bytes_per_s);
    CHECK(preset->link.latency_ns == e.latency_ns);
    CHECK(!preset->description.empty());
  }
  CHECK_FALSE(find_link_preset("pcie9"));
}

TEST_CASE("a machine starts from the trace's device and takes overrides", "[sim][machine]") {
  DeviceInfo device;
  device.memory_bytes = 1 << 20;
  device.link.h2d_bytes_per_s = 10e9;
  device.link.d2h_bytes_per_s = 12e9;
  device.link.latency_ns = 3000;
  Machine m = make_machine(device);
  CHECK(m.memory_bytes == 1 << 20);
  CHECK(m.link.h2d_bytes_per_s == 10e9);
  CHECK(m.link.d2h_bytes_per_s == 12e9);
  CHECK(m.link.latency_ns == 3000);
  CHECK(m.memory_bandwidth_bytes_per_s == kDefaultMemoryBandwidth);
  // 10 GB/s: 10 bytes per ns.
  CHECK(m.h2d_copy_ns(10'000) == 3000 + 1000);
  CHECK(m.d2h_copy_ns(12'000) == 3000 + 1000);
  CHECK(m.h2d_copy_ns(1) == 3001);  // rounded up to whole nanoseconds

  MachineOverrides o;
  o.link_name = "pcie4";
  o.link.latency_ns = 1000;  // a single value beats the preset
  o.memory_bytes = 2 << 20;
  m = make_machine(device, o);
  CHECK(m.link.h2d_bytes_per_s == 32e9);
  CHECK(m.link.d2h_bytes_per_s == 32e9);
  CHECK(m.link.latency_ns == 1000);
  CHECK(m.memory_bytes == 2 << 20);
  // What-if bandwidth rescales every copy: half the bandwidth, twice the transfer time.
  o = {};
  o.link.h2d_bytes_per_s = 5e9;
  m = make_machine(device, o);
  CHECK(m.h2d_copy_ns(10'000) == 3000 + 2000);
}

TEST_CASE("host ops run at the trace's measured speed, a flag's, or the default",
          "[sim][machine]") {
  DeviceInfo device;
  device.memory_bytes = 1 << 20;
  CHECK(make_machine(device).host_bandwidth_bytes_per_s == kDefaultHostBandwidth);
  device.host_bandwidth_bytes_per_s = 8e9;  // what `memplan record` measured
  Machine m = make_machine(device);
  CHECK(m.host_bandwidth_bytes_per_s == 8e9);
  // 8 GB/s: 8 bytes per ns; 1 MB of operands streamed in 125 us.
  CHECK(m.host_op_ns(1'000'000) == 125'000);
  MachineOverrides o;
  o.host_bandwidth_bytes_per_s = 40e9;  // --host-bandwidth 40GB/s beats the trace
  m = make_machine(device, o);
  CHECK(m.host_op_ns(1'000'000) == 25'000);
  o.host_bandwidth_bytes_per_s = 0;
  CHECK_THROWS_WITH(make_machine(device, o), Catch::Contains("--host-bandwidth"));
}

TEST_CASE("a trace without link data gets the default link", "[sim][machine]") {
  DeviceInfo device;
  device.memory_bytes = 1 << 20;
  const Machine m = make_machine(device);
  CHECK(m.link.h2d_bytes_per_s == find_link_preset(kDefaultLink)->link.h2d_bytes_per_s);
  CHECK(m.link.latency_ns == find_link_preset(kDefaultLink)->link.latency_ns);
}

TEST_CASE("bad machine values are input errors naming the flag", "[sim][machine][bad_input]") {
  DeviceInfo device;
  device.memory_bytes = 1 << 20;
  MachineOverrides o;
  o.link_name = "pcie9";
  CHECK_THROWS_WITH(make_machine(device, o),
                    Catch::Contains("--link") && Catch::Contains("unknown link 'pcie9'"));
  o = {};
  o.memory_bytes = 0;
  CHECK_THROWS_AS(make_machine(device, o), InputError);
  o = {};
  o.link.h2d_bytes_per_s = 0;
  CHECK_THROWS_WITH(make_machine(device, o), Catch::Contains("--h2d"));
  o = {};
  o.link.latency_ns = -1;
  CHECK_THROWS_WITH(make_machine(device, o), Catch::Contains("--latency"));
}

TEST_CASE("a recorded link is the trace's measured one, and a trace without one is refused",
          "[sim][machine]") {
  // An imported trace that measured its H2D copies only (as kineto_host_side_test's step does):
  // D2H falls back to pcie3's 16 GB/s and, with a bandwidth given but no latency, the latency is 0.
  DeviceInfo device;
  device.memory_bytes = 1 << 20;
  device.link.h2d_bytes_per_s = 8e9;
  MachineOverrides o;
  o.link_name = std::string(kRecordedLink);
  Machine m = make_machine(device, o);
  CHECK(m.link == Link{8e9, 16e9, 0});
  CHECK(m.link == make_machine(device).link);  // the same as giving no --link
  o.link.latency_ns = 2000;                    // single values still go over it
  m = make_machine(device, o);
  CHECK(m.link == Link{8e9, 16e9, 2000});

  device.link = {};
  o.link = {};
  CHECK_THROWS_WITH(make_machine(device, o), Catch::Contains("--link recorded") &&
                                                 Catch::Contains("the trace has no measured link"));
}
