// The shipped hand-written traces, with their `info` numbers worked out by hand.
#include <catch2/catch.hpp>

#include "core/feature_maps.hpp"
#include "io/trace_io.hpp"
#include "io/workload_summary.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using memplan::test::source_path;

namespace {
std::size_t count_ops(const WorkloadSummary& s, Phase phase) {
  std::size_t n = 0;
  for (const auto& [layer, count] : s.ops_by_layer[static_cast<std::size_t>(phase)]) n += count;
  return n;
}
}  // namespace

TEST_CASE("mlp4: info numbers match the hand calculation", "[sim][traces]") {
  const Workload w = read_trace(source_path("traces/mlp4.json"));
  const WorkloadSummary s = summarize(w);
  CHECK(s.op_count == 17);
  CHECK(s.tensor_count == 30);
  CHECK(count_ops(s, Phase::kForward) == 8);
  CHECK(count_ops(s, Phase::kBackward) == 8);
  CHECK(count_ops(s, Phase::kUpdate) == 1);
  CHECK(s.ops_by_layer[0].at("linear") == 4);
  CHECK(s.ops_by_layer[0].at("relu") == 3);
  // Weights 256x128 + 128x128 + 128x64 + 64x10 floats.
  CHECK(s.parameter_bytes() == 131072 + 65536 + 32768 + 2560);
  CHECK(s.tensors_by_kind[static_cast<std::size_t>(TensorKind::kOptimizerState)].bytes == 231936);
  // ReLU backward reads its output, so a1, a2, a3 are feature maps, and so are the softmax
  // probabilities; the pre-activations h1..h3 and the logits die in forward.
  CHECK(s.feature_map_count == 4);
  CHECK(s.feature_map_bytes == 2048 + 2048 + 1024 + 160);
  // Peak at fc1_bwd: weights and momentum (463872) + x (4096) + d_h1 (2048) + all four weight
  // gradients (231936), the last one being written.
  CHECK(s.peak.bytes == 463872 + 4096 + 2048 + 231936);
  CHECK(w.op(s.peak.op).name == "fc1_bwd");
  CHECK(s.compute_ns[0] == 51000);
  CHECK(s.compute_ns[1] == 82000);
  CHECK(s.compute_ns[2] == 10000);
}

TEST_CASE("resnet_tiny: info numbers match the hand calculation", "[sim][traces]") {
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const WorkloadSummary s = summarize(w);
  CHECK(s.op_count == 21);
  CHECK(s.tensor_count == 35);
  CHECK(count_ops(s, Phase::kForward) == 10);
  CHECK(count_ops(s, Phase::kBackward) == 10);
  CHECK(s.ops_by_layer[0].at("conv2d") == 3);
  CHECK(s.ops_by_layer[1].at("conv2d") == 3);
  CHECK(s.parameter_bytes() == 432 + 576 + 576 + 2560);
  // relu1_out, relu2_out, relu3_out (in place over the conv and add outputs), pool output and
  // indices, softmax probabilities.
  CHECK(s.feature_map_count == 6);
  CHECK(s.feature_map_bytes == 3 * 2048 + 512 + 1024 + 80);
  // Peak during conv2_bwd: weights+momentum 8288, x 1536, the relu1 buffer 2048 (the relu2
  // buffer died after relu2_bwd), g_fc 2560, d_add1_out 2048, g_conv3 576, d_conv2_out 2048,
  // its outputs 2048 + 576, and its 4096-byte workspace.
  CHECK(s.peak.bytes == 8288 + 1536 + 2048 + 2560 + 2048 + 576 + 2048 + 2048 + 576 + 4096);
  CHECK(s.peak.bytes == 25824);
  CHECK(w.op(s.peak.op).name == "conv2_bwd");
  CHECK(s.compute_ns[0] == 19400);
  CHECK(s.compute_ns[1] == 33700);
  CHECK(s.compute_ns[2] == 2000);
}

TEST_CASE("resnet_tiny: feature maps carry their forward and backward uses", "[sim][traces]") {
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const auto maps = find_feature_maps(w);
  REQUIRE(maps.size() == 6);
  const FeatureMap& relu1 = maps.front();
  CHECK(w.tensor(relu1.tensor).name == "relu1_out");
  CHECK(relu1.forward_uses == std::vector<OpId>{OpId{2}, OpId{5}});     // conv2, the skip add
  CHECK(relu1.backward_uses == std::vector<OpId>{OpId{16}, OpId{18}});  // conv2_bwd, relu1_bwd
}
