// The layer vocabulary (core/layer.hpp): names and rules agree, and a layer with no rule is a
// generic op that keeps its name through trace I/O and is simulated from its recorded figures.
// The aten table (core/aten_layers.hpp), which the Kineto importer and the PyTorch capture share:
// the layer of an aten op call by its name and, for some, its arguments.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/aten_layers.hpp"
#include "core/basic_plans.hpp"
#include "core/layer.hpp"
#include "core/machine.hpp"
#include "io/trace_io.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using memplan::test::source_path;

TEST_CASE("every layer's rule is found by its name, and only generic layers have none",
          "[sim][layer]") {
  for (const LayerRule& rule : layer_rules()) {
    CAPTURE(rule.name);
    CHECK(&rule_of(rule.layer) == &rule);
    if (rule.layer == Layer::kGeneric) {
      CHECK(rule.name.empty());
      continue;
    }
    CHECK(layer_named(rule.name) == rule.layer);
    const LayerType t = LayerType::named(rule.name);
    CHECK(t == rule.layer);
    CHECK(t.name() == rule.name);
    CHECK_FALSE(t.generic());
    // Convolution and pooling windows, and only they, have spatial dimensions.
    const bool windowed =
        rule.family == LayerFamily::kConvolution || rule.family == LayerFamily::kMaxPool ||
        (rule.family == LayerFamily::kAvgPool && rule.layer != Layer::kAdaptiveAvgPool);
    CHECK((rule.spatial_dims != 0) == windowed);
  }
  for (const char* name : {"aten::gelu", "swish", "Relu", "conv", ""}) {
    CAPTURE(name);
    const LayerType t = LayerType::named(name);
    CHECK(t.generic());
    CHECK(t.name() == name);
    CHECK(t.rule().layer == Layer::kGeneric);
  }
  CHECK(LayerType::named("aten::gelu") == LayerType::named("aten::gelu"));
  CHECK_FALSE(LayerType::named("aten::gelu") == LayerType::named("aten::relu"));
}

namespace {
// mlp4 with its first ReLU (forward and backward) renamed `name`.
Workload mlp4_with_first_relu_named(const std::string& name) {
  Workload w = read_trace(source_path("traces/mlp4.json"));
  const Op& relu = *std::find_if(w.ops.begin(), w.ops.end(),
                                 [](const Op& op) { return op.layer == Layer::kRelu; });
  const OpId forward = relu.id;
  for (Op& op : w.ops) {
    if (op.id == forward || op.differentiates == forward) op.layer = LayerType::named(name);
  }
  return w;
}
}  // namespace

TEST_CASE("a generic op keeps its name through trace I/O", "[sim][layer][trace_io]") {
  const Workload w = mlp4_with_first_relu_named("aten::gelu");
  const std::string text = write_trace(w);
  CHECK(text.find("\"aten::gelu\"") != std::string::npos);
  const Workload back = parse_trace(text, "<written>");
  CHECK(back == w);
  CHECK(write_trace(back) == text);
  std::size_t generic = 0;
  for (const Op& op : back.ops) {
    if (!op.layer.generic()) continue;
    ++generic;
    CHECK(op.layer.name() == "aten::gelu");
  }
  CHECK(generic == 2);  // the forward op and its backward
}

TEST_CASE("a generic op is simulated from its recorded time, tensors and inputs",
          "[sim][layer][engine]") {
  // The engine knows no layer: the same op under a generic name gives the same timeline.
  const Workload known = read_trace(source_path("traces/mlp4.json"));
  const Workload generic = mlp4_with_first_relu_named("aten::relu");
  const Machine machine = make_machine(known.device);
  for (Plan (*policy)(const Workload&) : {&in_core_plan, &swap_all_plan, &recompute_all_plan}) {
    const Program pa = lower(known, policy(known));
    const Program pb = lower(generic, policy(generic));
    CAPTURE(policy(known).policy);
    Engine a;
    Engine b;
    const Timeline& ta = a.run(pa, machine);
    const Timeline& tb = b.run(pb, machine);
    CHECK(tb.feasible == ta.feasible);
    CHECK(tb.iteration_ns == ta.iteration_ns);
    CHECK(tb.peak_bytes == ta.peak_bytes);
  }
}

namespace {
AtenArgument tensor_of_rank(std::size_t rank) {
  AtenArgument a;
  a.tensor = true;
  a.rank = rank;
  return a;
}
AtenArgument number(double value) {
  AtenArgument a;
  a.tensor = false;
  a.number = value;
  return a;
}
const AtenArgument kUnknown{};
}  // namespace

TEST_CASE("aten table: each name once, a layer of the vocabulary, tests that read an argument",
          "[core][layer][aten]") {
  std::set<std::string_view> names;
  for (const AtenLayer& row : aten_layers()) {
    CAPTURE(row.aten);
    CHECK(row.aten.substr(0, 6) == "aten::");
    CHECK(names.insert(row.aten).second);
    CHECK(find_aten_layer(row.aten) == &row);
    // A name-only row's layer is a row of the vocabulary, and aten_layer gives it whatever the
    // arguments; the other tests decide from the arguments they read.
    if (row.test == AtenTest::kName) {
      CHECK(row.layer != Layer::kGeneric);
      CHECK(row.argument == -1);
      CHECK(aten_layer(row, {}) == row.layer);
      CHECK(LayerType::named(rule_of(row.layer).name) == row.layer);
    } else {
      CHECK(row.argument >= 0);
    }
  }
  CHECK(find_aten_layer("aten::mm") == nullptr);
  CHECK(aten_layer("aten::mm", {}) == Layer::kGeneric);
  CHECK(find_aten_layer("conv2d") == nullptr);  // the aten name, with its namespace
}

TEST_CASE("aten table: the ops both readers of PyTorch steps rely on", "[core][layer][aten]") {
  // As called (the profiler's top-level events) and below autograd (the capture's), forward and
  // backward: one layer per meaning.
  const std::vector<std::pair<std::string_view, Layer>> expected = {
      {"aten::linear", Layer::kLinear},
      {"aten::addmm", Layer::kLinear},
      {"aten::batch_norm", Layer::kBatchNorm},
      {"aten::native_batch_norm", Layer::kBatchNorm},
      {"aten::native_batch_norm_backward", Layer::kBatchNorm},
      {"aten::layer_norm", Layer::kLayerNorm},
      {"aten::native_layer_norm_backward", Layer::kLayerNorm},
      {"aten::relu_", Layer::kRelu},
      {"aten::threshold_backward", Layer::kRelu},
      {"aten::relu6", Layer::kRelu6},
      {"aten::gelu_backward", Layer::kGelu},
      {"aten::max_pool2d", Layer::kMaxPool2d},
      {"aten::max_pool2d_with_indices_backward", Layer::kMaxPool2d},
      {"aten::max_pool3d_with_indices", Layer::kMaxPool3d},
      {"aten::avg_pool2d", Layer::kAvgPool2d},
      {"aten::adaptive_avg_pool2d", Layer::kAdaptiveAvgPool},
      {"aten::_adaptive_avg_pool2d", Layer::kAdaptiveAvgPool},
      {"aten::_adaptive_avg_pool2d_backward", Layer::kAdaptiveAvgPool},
      {"aten::native_dropout", Layer::kDropout},
      {"aten::cat", Layer::kConcat},
      {"aten::_softmax_backward_data", Layer::kSoftmax},
      {"aten::cross_entropy_loss", Layer::kSoftmaxCrossEntropy},
      {"aten::embedding_dense_backward", Layer::kEmbedding},
  };
  for (const auto& [aten, layer] : expected) {
    CAPTURE(aten);
    CHECK(aten_layer(aten, {}) == layer);
  }
  CHECK(find_aten_layer("aten::convolution_backward")->backward);
  CHECK_FALSE(find_aten_layer("aten::convolution")->backward);
}

TEST_CASE("aten table: a convolution's layer is its weight's rank, conv1d has none",
          "[core][layer][aten]") {
  const std::vector<AtenArgument> conv3d{tensor_of_rank(5), tensor_of_rank(5), tensor_of_rank(1)};
  const std::vector<AtenArgument> conv2d{tensor_of_rank(4), tensor_of_rank(4)};
  const std::vector<AtenArgument> conv1d{tensor_of_rank(3), tensor_of_rank(3), tensor_of_rank(1)};
  for (std::string_view aten : {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                                "aten::_convolution", "aten::cudnn_convolution"}) {
    CAPTURE(aten);
    CHECK(aten_layer(aten, conv3d) == Layer::kConv3d);
    CHECK(aten_layer(aten, conv2d) == Layer::kConv2d);
    CHECK(aten_layer(aten, conv1d) == Layer::kGeneric);  // Note [conv1d]
    CHECK(aten_layer(aten, {}) == Layer::kGeneric);      // no weight recorded
  }
  // convolution_backward(grad_output, input, weight, ...): the weight is its third argument.
  const std::vector<AtenArgument> backward3d{tensor_of_rank(5), tensor_of_rank(5),
                                             tensor_of_rank(5)};
  const std::vector<AtenArgument> backward1d{tensor_of_rank(3), tensor_of_rank(3),
                                             tensor_of_rank(3)};
  CHECK(aten_layer("aten::convolution_backward", backward3d) == Layer::kConv3d);
  CHECK(aten_layer("aten::convolution_backward", backward1d) == Layer::kGeneric);
  CHECK(convolution_layer(4) == Layer::kConv2d);
  CHECK(convolution_layer(5) == Layer::kConv3d);
  CHECK(convolution_layer(3) == Layer::kGeneric);
}

TEST_CASE("aten table: relu6 is hardtanh between 0 and 6, add is between two tensors",
          "[core][layer][aten]") {
  const AtenArgument x = tensor_of_rank(4);
  CHECK(aten_layer("aten::hardtanh_", std::vector{x, number(0), number(6)}) == Layer::kRelu6);
  CHECK(aten_layer("aten::hardtanh", std::vector{x, number(-1), number(1)}) == Layer::kGeneric);
  CHECK(aten_layer("aten::hardtanh", std::vector{x}) == Layer::kGeneric);  // the defaults, -1..1
  // Bounds the recording does not say (a profiler trace) cannot make it relu6.
  CHECK(aten_layer("aten::hardtanh", std::vector{x, kUnknown, kUnknown}) == Layer::kGeneric);
  // hardtanh_backward(grad_output, self, min_val, max_val)
  CHECK(aten_layer("aten::hardtanh_backward", std::vector{x, x, number(0), number(6)}) ==
        Layer::kRelu6);
  CHECK(aten_layer("aten::add", std::vector{x, x}) == Layer::kAdd);
  CHECK(aten_layer("aten::add_", std::vector{x, number(1)}) == Layer::kGeneric);
  // Only a known non-tensor says no: a 0-dim tensor and a scalar look alike in a profiler trace.
  CHECK(aten_layer("aten::add", std::vector{x, kUnknown}) == Layer::kAdd);
}
