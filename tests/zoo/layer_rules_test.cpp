// The zoo builds every layer as core/layer.hpp's table says: a backward op reads, after the output
// gradient, only what its layer's rule says is saved; weights only where the rule has them; a
// workspace only for layers that may use one.
#include <string>
#include <string_view>

#include <catch2/catch.hpp>

#include "core/layer.hpp"
#include "tests/zoo/zoo_test_support.hpp"

namespace sim = memplan::sim;

namespace {

// Which Saves bit tensor `t`, read by the backward of `forward`, falls under; 0 when it is none
// of the forward op's operands.
std::uint8_t saved_as(const sim::Workload& w, const sim::Op& forward, sim::TensorId t) {
  for (std::size_t o = 0; o < forward.outputs.size(); ++o) {
    if (forward.outputs[o] == t) return o == 0 ? sim::kSavesOutput : sim::kSavesExtras;
  }
  for (sim::TensorId in : forward.inputs) {
    if (in != t) continue;
    return w.tensor(t).kind == sim::TensorKind::kParameter ? sim::kSavesWeights : sim::kSavesInputs;
  }
  return 0;
}

}  // namespace

TEST_CASE("the zoo's layers read, save and need what core/layer.hpp's table says", "[zoo][layer]") {
  // Every layer the zoo builds, 2-d and 3-d; llama's and vit_b16's generic ops have no rule
  // (Note [Generic zoo ops]).
  for (const char* model :
       {"alexnet", "overfeat", "vgg16", "googlenet", "resnet50", "resnext101-3d", "densenet121",
        "mobilenet_v2", "gpt", "llama", "vit_b16"}) {
    CAPTURE(model);
    const bool has_generic =
        std::string_view(model) == "llama" || std::string_view(model) == "vit_b16";
    const sim::Workload w = memplan::test::build(model).workload;
    for (const sim::Op& op : w.ops) {
      CAPTURE(op.name);
      const sim::LayerRule& rule = op.layer.rule();
      if (op.layer.generic()) {
        CHECK(has_generic);
        continue;
      }
      if (op.phase == sim::Phase::kForward) {
        bool reads_parameter = false;
        for (sim::TensorId t : op.inputs) {
          reads_parameter |= w.tensor(t).kind == sim::TensorKind::kParameter;
        }
        CHECK(reads_parameter == (rule.weights != sim::Weights::kNone));
        if (!rule.workspace) CHECK(op.workspace_bytes == 0);
        continue;
      }
      if (op.phase != sim::Phase::kBackward || op.differentiates == sim::kNoOp) continue;
      const sim::Op& forward = w.op(op.differentiates);
      for (sim::TensorId t : op.inputs) {
        if (w.tensor(t).kind == sim::TensorKind::kGradient) continue;  // dy
        const std::uint8_t as = saved_as(w, forward, t);
        CAPTURE(w.tensor(t).name);
        CHECK(as != 0);
        CHECK((rule.saves & as) != 0);
      }
    }
  }
}
