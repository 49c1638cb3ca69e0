// The layer vocabulary (core/layer.hpp): names and rules agree, and a layer with no rule is a
// generic op that keeps its name through trace I/O and is simulated from its recorded figures.
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

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
