// requests/: the machine, search and sweep a user asks for, parsed and checked once for the CLI
// and the Python API. Each expected value is the unit grammar's (core/units.hpp) or the range the
// CLI refuses with (cli/flag_checks.hpp uses the same constants).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "requests/machine_request.hpp"
#include "requests/search_request.hpp"
#include "tests/support/workload_builder.hpp"

using memplan::requests::MachineRequest;
using memplan::requests::Quantity;
using memplan::sim::InputError;

namespace {

// The InputError's where, or "" when `f` does not throw one.
template <class F>
std::string refused_by(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.where();
  }
  return "";
}

memplan::sim::Workload tiny() {
  memplan::test::WorkloadBuilder b(1 << 30);
  const auto x = b.input("x", 1024);
  b.forward("a", {x}, 2048, 10);
  return b.build();
}

}  // namespace

TEST_CASE("a machine request reads text in the CLI's units and numbers in the base unit",
          "[requests]") {
  const auto workload = tiny();
  MachineRequest text;
  text.memory = Quantity{std::string("2GiB")};
  text.h2d = Quantity{std::string("12.5GB/s")};
  text.latency = Quantity{std::string("10us")};
  text.host_bandwidth = Quantity{std::string("20GB/s")};
  text.allocator = "caching";
  MachineRequest numbers;
  numbers.memory = Quantity{2.0 * 1024 * 1024 * 1024};
  numbers.h2d = Quantity{12.5e9};
  numbers.latency = Quantity{10'000.0};
  numbers.host_bandwidth = Quantity{20e9};
  numbers.allocator = "caching";
  const auto a = memplan::requests::make_machine(workload, text);
  const auto b = memplan::requests::make_machine(workload, numbers);
  CHECK(a.memory_bytes == std::int64_t{2} << 30);
  CHECK(a.link.h2d_bytes_per_s == 12.5e9);
  CHECK(a.link.latency_ns == 10'000);
  CHECK(a.host_bandwidth_bytes_per_s == 20e9);
  CHECK(a.allocator == memplan::sim::AllocatorModel::kCaching);
  CHECK(b.memory_bytes == a.memory_bytes);
  CHECK(b.link.h2d_bytes_per_s == a.link.h2d_bytes_per_s);
  CHECK(b.link.latency_ns == a.link.latency_ns);
  CHECK(b.host_bandwidth_bytes_per_s == a.host_bandwidth_bytes_per_s);
}

TEST_CASE("a bad machine value is refused naming its flag", "[requests][bad_input]") {
  const auto workload = tiny();
  const auto refused = [&](auto set) {
    MachineRequest r;
    set(r);
    return refused_by([&] { (void)memplan::requests::make_machine(workload, r); });
  };
  CHECK(refused([](MachineRequest& r) { r.memory = Quantity{-1.0}; }) == "--memory");
  CHECK(refused([](MachineRequest& r) { r.memory = Quantity{1.5}; }) == "--memory");
  CHECK(refused([](MachineRequest& r) { r.memory = Quantity{std::string("lots")}; }) == "--memory");
  CHECK(refused([](MachineRequest& r) {
          r.h2d = Quantity{std::numeric_limits<double>::quiet_NaN()};
        }) == "--h2d");
  CHECK(refused([](MachineRequest& r) { r.d2h = Quantity{0.0}; }) == "--d2h");
  CHECK(refused([](MachineRequest& r) { r.latency = Quantity{-5.0}; }) == "--latency");
  CHECK(refused([](MachineRequest& r) { r.host_memory = Quantity{1e30}; }) == "--host-memory");
  CHECK(refused([](MachineRequest& r) { r.host_bandwidth = Quantity{-1.0}; }) ==
        "--host-bandwidth");
  CHECK(refused([](MachineRequest& r) { r.allocator = "buddy"; }) == "--allocator");
  CHECK(refused([](MachineRequest& r) { r.link = "pcie9"; }) != "");
  // A zero latency is a machine, not an error.
  CHECK(refused([](MachineRequest& r) { r.latency = Quantity{0.0}; }).empty());
}

TEST_CASE("a memory budget may be a share of the step's in-core peak", "[requests]") {
  // tiny(): at op a, its input (1,024 B) and its output (2,048 B) are live: 3,072 B in core.
  const auto workload = tiny();
  REQUIRE(memplan::sim::incore_peak(workload).bytes == 3072);
  const auto budget = [&](const char* text) {
    MachineRequest r;
    r.memory = Quantity{std::string(text)};
    return memplan::requests::make_machine(workload, r).memory_bytes;
  };
  CHECK(budget("50%") == 1536);
  CHECK(budget("12.5%") == 384);
  CHECK(budget("100%") == 3072);
  CHECK(budget("150%") == 4608);
  CHECK(budget("33%") == 1013);  // 1,013.76 rounded down to whole bytes
  const auto refused = [&](const char* text) { return refused_by([&] { (void)budget(text); }); };
  for (const char* bad : {"%", "-5%", "0%", "nan%", "inf%", "five%", "50 %", "0.001%", "1e300%"}) {
    CAPTURE(bad);
    CHECK(refused(bad) == "--memory");
  }
  // Without a trace there is nothing to take a share of: the overrides alone refuse it.
  MachineRequest share;
  share.memory = Quantity{std::string("50%")};
  CHECK(refused_by([&] { (void)memplan::requests::overrides(share); }) == "--memory");
}

TEST_CASE("a machine request names its interconnect by presets", "[requests][interconnect]") {
  const auto workload = tiny();
  MachineRequest r;
  CHECK_FALSE(memplan::requests::make_machine(workload, r).interconnect);
  r.interconnect = "recorded";
  CHECK_FALSE(memplan::requests::make_machine(workload, r).interconnect);
  r.interconnect = "nvlink4";
  r.network = "ib-ndr";
  r.gpus_per_node = 4;
  const auto m = memplan::requests::make_machine(workload, r);
  REQUIRE(m.interconnect);
  CHECK(m.interconnect->name == "nvlink4 + ib-ndr");
  CHECK(m.interconnect->intra.bytes_per_s == 450e9);
  CHECK(m.interconnect->inter.bytes_per_s == 50e9);
  CHECK(m.interconnect->gpus_per_node == 4);
}

TEST_CASE("a job's machines are each rank's device with the same request", "[requests]") {
  memplan::sim::Job job;
  for (const std::int64_t memory : {std::int64_t{1} << 30, std::int64_t{2} << 30}) {
    memplan::test::WorkloadBuilder b(memory);
    b.forward("a", {b.input("x", 1024)}, 2048, 10);
    job.ranks.push_back(b.build());
  }
  MachineRequest r;
  r.h2d = Quantity{std::string("12.5GB/s")};
  r.interconnect = "nvlink4";
  const auto machines = memplan::requests::make_machines(job, r);
  REQUIRE(machines.size() == 2);
  CHECK(machines[0].memory_bytes == std::int64_t{1} << 30);  // each rank's own device
  CHECK(machines[1].memory_bytes == std::int64_t{2} << 30);
  for (const auto& m : machines) {
    CHECK(m.link.h2d_bytes_per_s == 12.5e9);
    REQUIRE(m.interconnect);
    CHECK(m.interconnect->name == "nvlink4");
  }
  r.memory = Quantity{std::string("4GiB")};
  for (const auto& m : memplan::requests::make_machines(job, r))
    CHECK(m.memory_bytes == std::int64_t{4} << 30);
  r.network = "warp";
  CHECK(refused_by([&] { (void)memplan::requests::make_machines(job, r); }) == "--network");
}

TEST_CASE("a bad interconnect is refused naming its flag", "[requests][interconnect][bad_input]") {
  const auto workload = tiny();
  const auto refused = [&](auto set) {
    MachineRequest r;
    r.interconnect = "nvlink4";
    set(r);
    return refused_by([&] { (void)memplan::requests::make_machine(workload, r); });
  };
  CHECK(refused([](MachineRequest& r) { r.interconnect = "nvlink9"; }) == "--interconnect");
  CHECK(refused([](MachineRequest& r) { r.interconnect = "ib-ndr"; }) == "--interconnect");
  CHECK(refused([](MachineRequest& r) { r.network = "warp"; }) == "--network");
  CHECK(refused([](MachineRequest& r) { r.network = "nvlink3"; }) == "--network");
  CHECK(refused([](MachineRequest& r) { r.gpus_per_node = 0; }) == "--gpus-per-node");
  CHECK(refused([](MachineRequest& r) { r.gpus_per_node = -8; }) == "--gpus-per-node");
  CHECK(refused([](MachineRequest& r) { r.gpus_per_node = std::int64_t{1} << 40; }) ==
        "--gpus-per-node");
  // A network or a node size without an intra-node fabric, or with "recorded".
  CHECK(refused([](MachineRequest& r) {
          r.interconnect.reset();
          r.network = "ib-ndr";
        }) == "--network");
  CHECK(refused([](MachineRequest& r) {
          r.interconnect.reset();
          r.gpus_per_node = 8;
        }) == "--gpus-per-node");
  CHECK(refused([](MachineRequest& r) {
          r.interconnect = "recorded";
          r.network = "ib-ndr";
        }) == "--network");
  CHECK(refused([](MachineRequest& r) { r.gpus_per_node = 1024; }).empty());
}

TEST_CASE("a search request out of range is refused naming its flag", "[requests][bad_input]") {
  using memplan::requests::SearchRequest;
  const auto refused = [](auto set) {
    SearchRequest r;
    set(r);
    return refused_by([&] { (void)memplan::requests::search_options(r); });
  };
  CHECK(refused([](SearchRequest& r) { r.threads = -1; }) == "--threads");
  CHECK(refused([](SearchRequest& r) { r.threads = 100'000; }) == "--threads");
  CHECK(refused([](SearchRequest& r) { r.time_limit_s = std::nan(""); }) == "--time-limit");
  CHECK(refused([](SearchRequest& r) { r.time_limit_s = 0; }) == "--time-limit");
  CHECK(refused([](SearchRequest& r) { r.time_limit_s = -1; }) == "--time-limit");
  CHECK(refused([](SearchRequest& r) { r.rounds = std::int64_t{2'000'000'000}; }) == "--rounds");
  // 0 rounds is refused as the CLI refuses it, not taken for "until converged" (#40 item 3).
  CHECK(refused([](SearchRequest& r) { r.rounds = 0; }) == "--rounds");
  CHECK(refused([](SearchRequest& r) { r.rounds = -1; }) == "--rounds");
  CHECK(memplan::requests::search_options(SearchRequest{}).max_rounds == 0);  // until converged
  CHECK(refused([](SearchRequest& r) { r.seed = ~std::uint64_t{0}; }) == "--seed");
  CHECK(refused([](SearchRequest& r) { r.encode = "zip"; }) == "--encode");
  for (const Quantity& gap : {Quantity{-0.1}, Quantity{std::nan("")}, Quantity{101.0},
                              Quantity{std::string("-1%")}, Quantity{std::string("1e5%x")},
                              Quantity{std::string("%")}, Quantity{std::string("half")}}) {
    CHECK(refused([&](SearchRequest& r) { r.gap = gap; }) == "--gap");
  }
  // A fraction or a percentage, the default half a percent.
  using memplan::requests::gap_of;
  CHECK(memplan::requests::search_options(SearchRequest{}).gap == 0.005);
  CHECK(gap_of(Quantity{std::string("0.5%")}, "--gap") == Approx(0.005));
  CHECK(gap_of(Quantity{std::string("2 %")}, "--gap") == Approx(0.02));
  CHECK(gap_of(Quantity{std::string("0.01")}, "--gap") == 0.01);
  CHECK(gap_of(Quantity{0.0}, "--gap") == 0.0);
  CHECK_THROWS_WITH(gap_of(Quantity{std::string("half")}, "--gap"),
                    "--gap: 'half' is not a gap, like 0.5% or 0.005");
  CHECK_THROWS_WITH(gap_of(Quantity{std::string("-1%")}, "--gap"),
                    "--gap: -1% is not a gap from 0 to 100 (10000%)");

  SearchRequest r;
  r.threads = 3;
  r.time_limit_s = 2.5;
  r.rounds = 7;
  r.seed = 11;
  r.deterministic = true;
  r.maps_only = true;
  r.encode = "binarize";
  const auto o = memplan::requests::search_options(r);
  CHECK(o.threads == 3);
  CHECK(o.time_limit_s == 2.5);
  CHECK(o.max_rounds == 7);
  CHECK(o.seed == 11);
  CHECK(o.deterministic);
  CHECK_FALSE(o.host_placement);
  CHECK(o.encodings.binarize);
  CHECK_FALSE(o.encodings.sparse);
}

TEST_CASE("a sweep request builds the grid and refuses what cannot run", "[requests]") {
  using memplan::requests::SweepRequest;
  SweepRequest r;
  r.memories = {Quantity{std::string("1GiB")}, Quantity{2.0 * 1024 * 1024 * 1024}};
  r.links = {"pcie3"};
  r.bandwidths = {"8GB/s"};
  const auto grid = memplan::requests::sweep_grid({{"tiny", tiny()}}, r);
  REQUIRE(grid.memories.size() == 2);
  CHECK(grid.memories[0] == std::int64_t{1} << 30);
  CHECK(grid.memories[1] == std::int64_t{2} << 30);
  REQUIRE(grid.links.size() == 2);
  CHECK(grid.links[0].label == "pcie3");
  CHECK(grid.links[1].overrides.link.h2d_bytes_per_s == 8e9);
  r.deterministic = true;  // search cells stop by the clock unless rounds are given
  CHECK(refused_by([&] { (void)memplan::requests::sweep_options(r); }) == "--deterministic");
  r.search_rounds = 0;
  CHECK(refused_by([&] { (void)memplan::requests::sweep_options(r); }) == "--search-rounds");
  r.search_rounds = 2;
  CHECK(memplan::requests::sweep_options(r).deterministic);
  r.search_time_limit_s = -3;
  CHECK(refused_by([&] { (void)memplan::requests::sweep_options(r); }) == "--search-time-limit");
}
