#include <catch2/catch.hpp>

#include "core/feature_maps.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;

TEST_CASE("feature maps are the activations forward writes and backward reads",
          "[sim][feature_maps]") {
  const Workload w = read_trace(memplan::test::source_path("traces/mlp4.json"));
  const auto maps = find_feature_maps(w);
  std::vector<std::string> names;
  for (const auto& fm : maps) names.push_back(w.tensor(fm.tensor).name);
  CHECK(names == std::vector<std::string>{"a1", "a2", "a3", "probs"});
  // a1 is read by fc2 in forward and by fc2_bwd and relu1_bwd in backward.
  CHECK(maps[0].forward_uses == std::vector<OpId>{OpId{2}});
  CHECK(maps[0].backward_uses == std::vector<OpId>{OpId{13}, OpId{14}});
}
