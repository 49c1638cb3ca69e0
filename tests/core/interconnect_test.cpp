// Fabric presets (core/interconnect.hpp) carry the vendors' numbers the table in
// docs/simulator.md gives; make_interconnect refuses what it cannot build naming the flag; the
// Machine builds its interconnect from --interconnect, --network and --gpus-per-node.
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/interconnect.hpp"
#include "core/machine.hpp"

using namespace memplan::sim;

namespace {

// The InputError's where and problem, or "" when `f` does not throw one.
template <class F>
std::string refused(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

DeviceInfo device() {
  DeviceInfo d;
  d.memory_bytes = 1 << 30;
  return d;
}

}  // namespace

TEST_CASE("fabric presets carry the documented bandwidths and latencies", "[interconnect]") {
  const struct {
    const char* name;
    double bytes_per_s;
    Nanoseconds latency_ns;
    bool between_nodes;
  } expected[] = {
      {"nvlink3", 300e9, 2'000, false},  {"nvlink4", 450e9, 2'000, false},
      {"nvlink5", 900e9, 2'000, false},  {"pcie4-p2p", 25e9, 2'500, false},
      {"pcie5-p2p", 50e9, 2'500, false}, {"xgmi", 448e9, 2'000, false},
      {"ib-hdr", 25e9, 5'000, true},     {"ib-ndr", 50e9, 5'000, true},
      {"roce-400g", 50e9, 5'000, true},
  };
  REQUIRE(fabric_presets().size() == std::size(expected));
  for (const auto& e : expected) {
    CAPTURE(e.name);
    const auto preset = find_fabric_preset(e.name);
    REQUIRE(preset);
    CHECK(preset->fabric.bytes_per_s == e.bytes_per_s);
    CHECK(preset->fabric.latency_ns == e.latency_ns);
    CHECK(preset->between_nodes == e.between_nodes);
    CHECK(!preset->description.empty());
  }
  CHECK_FALSE(find_fabric_preset("nvlink9"));
  CHECK_FALSE(find_fabric_preset("recorded"));
  CHECK(fabric_preset_names(false) == "nvlink3, nvlink4, nvlink5, pcie4-p2p, pcie5-p2p, xgmi");
  CHECK(fabric_preset_names(true) == "ib-hdr, ib-ndr, roce-400g");
}

TEST_CASE("make_interconnect joins a fabric and a network", "[interconnect]") {
  const Interconnect net = make_interconnect("nvlink4", "ib-ndr", 4);
  CHECK(net.name == "nvlink4 + ib-ndr");
  CHECK(net.intra == Fabric{450e9, 2'000});
  CHECK(net.inter == Fabric{50e9, 5'000});
  CHECK(net.gpus_per_node == 4);
  // Without a network the fabric joins every GPU.
  const Interconnect alone = make_interconnect("xgmi", std::nullopt, 8);
  CHECK(alone.name == "xgmi");
  CHECK(alone.inter == alone.intra);
}

TEST_CASE("make_interconnect refuses what it cannot build, naming the flag", "[interconnect]") {
  const auto made = [](const char* intra, std::optional<std::string_view> inter, int gpus) {
    return refused([&] { (void)make_interconnect(intra, inter, gpus); });
  };
  std::string why = made("nvlink9", std::nullopt, 8);
  CHECK(why.starts_with("--interconnect: unknown fabric 'nvlink9'"));
  CHECK(why.find("nvlink4") != std::string::npos);
  CHECK(why.find("recorded") != std::string::npos);
  why = made("ib-ndr", std::nullopt, 8);
  CHECK(why.starts_with("--interconnect: 'ib-ndr' is a network between nodes"));
  CHECK(why.find("--network") != std::string::npos);
  why = made("nvlink4", "warp", 8);
  CHECK(why.starts_with("--network: unknown network 'warp'"));
  CHECK(why.find("ib-hdr, ib-ndr, roce-400g") != std::string::npos);
  why = made("nvlink4", "nvlink3", 8);
  CHECK(why.starts_with("--network: 'nvlink3' joins the GPUs of one node"));
  CHECK(made("nvlink4", "ib-ndr", 0).starts_with("--gpus-per-node: 0 is not a whole number"));
  CHECK(made("nvlink4", "ib-ndr", 1025).starts_with("--gpus-per-node: 1025"));
  CHECK(made("nvlink4", "ib-ndr", -3).starts_with("--gpus-per-node"));
  CHECK(made("nvlink4", "ib-ndr", 1).empty());
  CHECK(made("nvlink4", "ib-ndr", kMaxGpusPerNode).empty());
}

TEST_CASE("the machine's interconnect comes from the flags", "[interconnect]") {
  CHECK_FALSE(make_machine(device()).interconnect);
  MachineOverrides o;
  o.interconnect = "recorded";
  CHECK_FALSE(make_machine(device(), o).interconnect);
  o.interconnect = "nvlink5";
  o.network = "ib-hdr";
  o.gpus_per_node = 4;
  const Machine m = make_machine(device(), o);
  REQUIRE(m.interconnect);
  CHECK(*m.interconnect == make_interconnect("nvlink5", "ib-hdr", 4));
  o.gpus_per_node.reset();
  CHECK(make_machine(device(), o).interconnect->gpus_per_node == kDefaultGpusPerNode);
  // The rest of the machine is as without the interconnect.
  o.network.reset();
  const Machine plain = make_machine(device());
  const Machine with = make_machine(device(), o);
  CHECK(with.memory_bytes == plain.memory_bytes);
  CHECK(with.link == plain.link);

  const auto made = [](const MachineOverrides& overrides) {
    return refused([&] { (void)make_machine(device(), overrides); });
  };
  MachineOverrides network_only;
  network_only.network = "ib-ndr";
  CHECK(made(network_only).starts_with("--network: name the intra-node fabric too"));
  MachineOverrides gpus_only;
  gpus_only.gpus_per_node = 4;
  CHECK(made(gpus_only).starts_with("--gpus-per-node: name the intra-node fabric too"));
  network_only.interconnect = "recorded";
  CHECK(made(network_only).starts_with("--network: prices collectives"));
  MachineOverrides unknown;
  unknown.interconnect = "nvlink9";
  CHECK(made(unknown).starts_with("--interconnect: unknown fabric"));
}
