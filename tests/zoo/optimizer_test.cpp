// The zoo's optimizers (ModelOptions::optimizer, `memplan zoo --optimizer`): SGD with momentum
// keeps one state tensor per parameter and updates with `sgd`; Adam keeps two (exp_avg,
// exp_avg_sq) and updates with `adam`, whose modeled time is its memory traffic.
#include <filesystem>
#include <string>

#include <fmt/core.h>
#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"
#include "tests/zoo/zoo_test_support.hpp"
#include "zoo/zoo.hpp"

namespace zoo = memplan::zoo;
namespace sim = memplan::sim;
using memplan::test::tensor_named;
using sim::TensorKind;

namespace {

zoo::ZooRequest resnet18_on_v100(zoo::Optimizer optimizer) {
  zoo::ZooRequest request;
  request.model = "resnet18";
  request.device = "v100-16gb";
  request.options.batch = 1;
  request.options.optimizer = optimizer;
  return request;
}

std::size_t count_kind(const sim::Workload& w, TensorKind kind, sim::Bytes* bytes) {
  std::size_t n = 0;
  for (const sim::Tensor& t : w.tensors) {
    if (t.kind != kind) continue;
    ++n;
    *bytes += t.bytes;
  }
  return n;
}

}  // namespace

TEST_CASE("with adam every parameter has exp_avg and exp_avg_sq, and the update is adam",
          "[zoo][optimizer]") {
  const sim::Workload sgd = zoo::make_workload(resnet18_on_v100(zoo::Optimizer::kSgd));
  const sim::Workload adam = zoo::make_workload(resnet18_on_v100(zoo::Optimizer::kAdam));
  // ResNet-18: 62 trainable tensors (20 convs, 20 batch-norms × 2, fc weight and bias),
  // 11,689,512 elements; its 82 parameter tensors include 20 batch-norm running statistics, which
  // have no gradient and no optimizer state.
  constexpr sim::Bytes kParameterBytes = 4 * 11'689'512;
  sim::Bytes param_bytes = 0, sgd_state = 0, adam_state = 0;
  CHECK(count_kind(adam, TensorKind::kParameter, &param_bytes) == 82);
  CHECK(count_kind(sgd, TensorKind::kOptimizerState, &sgd_state) == 62);
  CHECK(sgd_state == kParameterBytes);  // 46,758,048: one momentum buffer each
  CHECK(count_kind(adam, TensorKind::kOptimizerState, &adam_state) == 2 * 62);
  CHECK(adam_state == 2 * kParameterBytes);  // 93,516,096: exp_avg and exp_avg_sq each
  CHECK(tensor_named(adam, "exp_avg_conv1.weight").bytes == 4 * 64 * 3 * 7 * 7);
  CHECK(tensor_named(adam, "exp_avg_sq_fc.bias").shape == std::vector<std::int64_t>{1000});

  // The update: params, grads, exp_avgs, exp_avg_sqs, 62 each, in that order, PyTorch's defaults.
  const sim::Op& update = adam.ops.back();
  CHECK(update.name == "adam");
  CHECK(update.layer == sim::Layer::kAdam);
  CHECK(update.phase == sim::Phase::kUpdate);
  CHECK(update.outputs.empty());
  REQUIRE(update.inputs.size() == 4 * 62);
  CHECK(adam.tensor(update.inputs[0]).name == "conv1.weight");
  CHECK(adam.tensor(update.inputs[62]).kind == TensorKind::kGradient);
  CHECK(adam.tensor(update.inputs[2 * 62]).name == "exp_avg_conv1.weight");
  CHECK(adam.tensor(update.inputs[3 * 62]).name == "exp_avg_sq_conv1.weight");
  CHECK(update.attributes.at("betas") == std::vector<double>{0.9, 0.999});
  CHECK(update.attributes.at("step") == std::vector<double>{1});

  // Its traffic: reads params, grads and both states (4 tensors), writes params and both states
  // (3): 7 × 46,758,048 = 327,306,336 bytes, against SGD's 5 × 46,758,048 = 233,790,240. On the
  // V100 (900 GB/s at the update's 0.7 memory efficiency) that is 327,306,336 / 630e9 s =
  // 519.534 us (its 12 flops an element need only 17.9 us), plus the 2.5 us kernel overhead:
  // 522,034 ns; SGD's 371.096 + 2.5 = 373,596 ns.
  CHECK(update.bytes_moved == 327'306'336);
  CHECK(sgd.ops.back().bytes_moved == 233'790'240);
  CHECK(update.duration_ns == 522'034);
  CHECK(sgd.ops.back().duration_ns == 373'596);
  // Everything before the update is the same step.
  REQUIRE(adam.ops.size() == sgd.ops.size());
  for (std::size_t i = 0; i + 1 < adam.ops.size(); ++i) CHECK(adam.ops[i] == sgd.ops[i]);
  // The state lives through the whole step, so the in-core peak grows by the second state.
  CHECK(sim::incore_peak(adam).bytes - sim::incore_peak(sgd).bytes == kParameterBytes);
  CHECK(adam.provenance.note.find(", fp32, Adam") != std::string::npos);
}

TEST_CASE("memplan zoo --optimizer adam writes the adam step, a bad optimizer is exit 2",
          "[cli][zoo][optimizer]") {
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  const auto path = dir / "gpt.json";
  const std::string gpt =
      "zoo gpt --batch 1 --layers 1 --hidden 64 --heads 2 --seq 16 --vocab 100 --device "
      "v100-16gb";
  const auto r = memplan::test::run_memplan(
      fmt::format("{} --optimizer adam --json -o '{}'", gpt, path.string()));
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("\"optimizer\": \"adam\"") != std::string::npos);
  const sim::Workload w = sim::read_trace(path);
  CHECK(w.ops.back().layer == sim::Layer::kAdam);
  sim::Bytes params = 0, state = 0;
  CHECK(count_kind(w, TensorKind::kOptimizerState, &state) ==
        2 * count_kind(w, TensorKind::kParameter, &params));
  CHECK(state == 2 * params);
  // The default stays SGD with momentum.
  REQUIRE(memplan::test::run_memplan(fmt::format("{} -o '{}'", gpt, path.string())).exit_status ==
          0);
  CHECK(sim::read_trace(path).ops.back().layer == sim::Layer::kSgd);
  std::filesystem::remove(path);
  const auto bad =
      memplan::test::run_memplan(fmt::format("{} --optimizer lamb -o '{}'", gpt, path.string()));
  CAPTURE(bad.err);
  CHECK(bad.exit_status == 2);
  CHECK(bad.err.find("--optimizer") != std::string::npos);
  CHECK(bad.err.find('\n') == bad.err.size() - 1);
  CHECK(!std::filesystem::exists(path));
  CHECK_THROWS_AS(zoo::optimizer_named("adamw"), sim::InputError);
  std::filesystem::remove_all(dir);
}
