// scratch
#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <map>
#include "zoo/models.hpp"
#include "zoo/saved_activations.hpp"
#include "zoo/zoo.hpp"
#include "sim/liveness.hpp"
using namespace memplan;
TEST_CASE("scratch") {
  for (const auto& m : zoo::models()) {
    zoo::ZooRequest r{std::string(m.name), "v100-16gb", {}};
    r.options.batch = 1;
    if (m.takes_depth) r.options.depth = 1517;
    auto w = zoo::make_workload(r);
    auto built = zoo::build_model(*zoo::find_model(m.name), r.options);
    fmt::print("{:<16} params {:>12} saved {:>10.2f} MB ops {} peak {:.1f} MB\n", m.name, built.parameter_count,
               double(zoo::saved_activation_bytes(w)) / 1e6, w.ops.size(), double(sim::incore_peak(w).bytes) / 1e6);
  }
  zoo::ZooRequest r{"resnet50", "v100-32gb", {}};
  r.options.batch = 32;
  auto w = zoo::make_workload(r);
  std::map<std::string, double> t;
  double total = 0;
  for (auto& op : w.ops) { t[op.layer + (op.phase == sim::Phase::kForward ? " fwd" : op.phase == sim::Phase::kBackward ? " bwd" : " upd")] += double(op.duration_ns) / 1e6; total += double(op.duration_ns) / 1e6; }
  for (auto& [k, v] : t) fmt::print("{:<30} {:8.2f} ms\n", k, v);
  fmt::print("total {:.2f} ms\n", total);
}
