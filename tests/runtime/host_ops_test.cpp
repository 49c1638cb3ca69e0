// The update ops a backend runs on the CPU (runtime/host_ops.hpp): Adam's scalars and loop against
// steps worked out by hand from torch.optim.Adam's formula, and the host stream's update
// (runtime::run_host_op) bitwise equal to the host device's (host_backend::OpExecutor), since a
// plan may update on either and the validation compares their bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "host_backend/op_executor.hpp"
#include "runtime/backend_error.hpp"
#include "runtime/host_ops.hpp"

namespace mp = memplan;
using mp::runtime::adam_step;
using mp::runtime::adam_update;
using mp::runtime::AdamStep;
using mp::sim::TensorKind;

namespace {

mp::sim::Op adam_op(std::size_t inputs, mp::sim::Attributes attributes = {}) {
  mp::sim::Op op;
  op.id = mp::sim::OpId{0};
  op.name = "adam";
  op.layer = mp::sim::Layer::kAdam;
  op.phase = mp::sim::Phase::kUpdate;
  for (std::size_t i = 0; i < inputs; ++i) op.inputs.push_back(static_cast<mp::sim::TensorId>(i));
  op.attributes = std::move(attributes);
  return op;
}

// Parameters of the given sizes with their gradients, exp_avgs and exp_avg_sqs: four groups, as
// the zoo writes them; the op reads them all.
mp::sim::Workload adam_workload(const std::vector<std::int64_t>& sizes,
                                mp::sim::Attributes attributes) {
  mp::sim::Workload w;
  const TensorKind kinds[] = {TensorKind::kParameter, TensorKind::kGradient,
                              TensorKind::kOptimizerState, TensorKind::kOptimizerState};
  for (TensorKind kind : kinds) {
    for (std::int64_t n : sizes) {
      mp::sim::Tensor t;
      t.id = static_cast<mp::sim::TensorId>(w.tensors.size());
      t.name = "t" + std::to_string(mp::sim::value(t.id));
      t.kind = kind;
      t.shape = {n};
      t.dtype = "float32";
      t.bytes = 4 * n;
      w.tensors.push_back(t);
    }
  }
  w.ops.push_back(adam_op(w.tensors.size(), std::move(attributes)));
  return w;
}

}  // namespace

TEST_CASE("adam's scalars are torch.optim.Adam's, computed in double and rounded once",
          "[runtime][host_ops][adam]") {
  // No attributes: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0, step 1. Then
  // 1 - beta1^1 = 0.09999999999999998 and lr / that = 0.010000000000000002 (doubles), which round
  // to the floats 0.01f and 0.1f; sqrt(1 - 0.999) = 0.0316227766016838 → 0.031622775f.
  const AdamStep d = adam_step(adam_op(4));
  CHECK(d.beta1_weight == 0.1f);
  CHECK(d.beta2 == 0.999f);
  CHECK(d.beta2_weight == 0.001f);
  CHECK(d.weight_decay == 0.0f);
  CHECK(d.eps == 1e-8f);
  CHECK(d.neg_step_size == -0.01f);
  CHECK(d.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - 0.999)));
  // Step 2, lr 0.01, weight decay 0.1: 1 - 0.9^2 = 0.19, step size 0.01 / 0.19 = 0.0526315789...;
  // 1 - 0.999^2 = 0.001999, its root 0.0447101778...
  const AdamStep s = adam_step(adam_op(
      4, {{"lr", {0.01}}, {"betas", {0.9, 0.999}}, {"weight_decay", {0.1}}, {"step", {2}}}));
  CHECK(s.neg_step_size == static_cast<float>(-0.01 / 0.19));
  CHECK(s.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 2))));
  CHECK(s.weight_decay == 0.1f);
  // A step count below 1 or betas outside [0, 1) are refused, naming the op.
  CHECK_THROWS_AS(adam_step(adam_op(4, {{"step", {0}}})), mp::runtime::BackendError);
  CHECK_THROWS_AS(adam_step(adam_op(4, {{"betas", {0.9, 1.0}}})), mp::runtime::BackendError);
}

TEST_CASE("adam_update: the first step moves each weight by lr against its gradient's sign",
          "[runtime][host_ops][adam]") {
  // Step 1 from zero state: m = 0.1·g, v = 0.001·g², so sqrt(v)/sqrt(0.001) = |g| and
  // w' = w - 0.01 · 0.1·g / (|g| + 1e-8) = w - 0.001·sign(g) (to within eps/|g|): in float,
  // w = 1, g = 0.5: m = 0.05f, v = 0.00025f, w' = 0.999f (1 - 0.001 rounded: 0x1.ff7ceep-1);
  // w = 1, g = -2:  m = -0.2f, v = 0.004f,   w' = 1.001f (1.0010000467, 0x1.00418ap+0);
  // w = 0.25, g = 0: everything stays (0 / (0 + eps) = 0).
  std::vector<float> w{1.0f, 1.0f, 0.25f};
  const std::vector<float> g{0.5f, -2.0f, 0.0f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  adam_update(3, adam_step(adam_op(4)), w.data(), g.data(), m.data(), v.data());
  CHECK(w == std::vector<float>{0.999f, 1.001f, 0.25f});
  CHECK(m == std::vector<float>{0.05f, -0.2f, 0.0f});
  CHECK(v == std::vector<float>{0.00025f, 0.004f, 0.0f});
  CHECK(w[0] == Approx(0.99900000002).epsilon(1e-7));  // the exact real-number step
}

TEST_CASE("adam_update: a second step with weight decay, bias-corrected by the step count",
          "[runtime][host_ops][adam]") {
  // w = 1, g = 2, m = 0.5, v = 0.25, lr 0.01, weight decay 0.1, step 2:
  //   g' = 2 + 0.1·1 = 2.1
  //   m  = 0.5 + 0.1·(2.1 - 0.5) = 0.66                       (float: 0.65999997, 0x1.51eb84p-1)
  //   v  = 0.999·0.25 + 0.001·2.1² = 0.24975 + 0.00441 = 0.25416 (float: 0.25416002)
  //   w' = 1 - (0.01/0.19)·0.66 / (sqrt(0.25416)/sqrt(0.001999) + 1e-8)
  //      = 1 - 0.0526316·0.66 / 11.275782 = 0.99691934453  (float: 0.99691933, 0x1.fe6c36p-1)
  std::vector<float> w{1.0f}, m{0.5f}, v{0.25f};
  const std::vector<float> g{2.0f};
  const AdamStep s =
      adam_step(adam_op(4, {{"lr", {0.01}}, {"weight_decay", {0.1}}, {"step", {2}}}));
  adam_update(1, s, w.data(), g.data(), m.data(), v.data());
  CHECK(m[0] == 0.65999997f);
  CHECK(v[0] == 0.25416002f);
  CHECK(w[0] == 0.99691933f);
  CHECK(m[0] == Approx(0.66).epsilon(1e-6));
  CHECK(v[0] == Approx(0.25416).epsilon(1e-6));
  CHECK(w[0] == Approx(0.99691934453).epsilon(1e-7));
}

TEST_CASE("the host stream's adam and the host device's adam give the same bits",
          "[runtime][host_ops][host_backend][adam]") {
  // Two parameters (5 and 3 elements), step 3 with weight decay: random weights and gradients,
  // states as after earlier steps (exp_avg_sq non-negative).
  const mp::sim::Workload w = adam_workload({5, 3}, {{"lr", {0.002}},
                                                     {"betas", {0.8, 0.99}},
                                                     {"eps", {1e-6}},
                                                     {"weight_decay", {0.01}},
                                                     {"step", {3}}});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> data;
  for (const mp::sim::Tensor& t : w.tensors) {
    std::vector<float> x(static_cast<std::size_t>(t.shape[0]));
    for (float& e : x) e = u(rng);
    if (t.id >= mp::sim::TensorId{6}) {
      for (float& e : x) e *= e;  // exp_avg_sq
    }
    data.push_back(x);
  }
  std::vector<std::vector<float>> on_host = data;
  std::vector<std::vector<float>> on_device = data;
  std::vector<std::byte*> host_operands;
  std::vector<void*> device_operands;
  for (std::size_t i = 0; i < data.size(); ++i) {
    host_operands.push_back(reinterpret_cast<std::byte*>(on_host[i].data()));
    device_operands.push_back(on_device[i].data());
  }
  mp::runtime::run_host_op(w, w.ops[0], host_operands);
  mp::host_backend::OpExecutor(w).run(w.ops[0], device_operands);
  for (std::size_t i = 0; i < data.size(); ++i) {
    CAPTURE(i);
    REQUIRE(on_host[i].size() == on_device[i].size());
    CHECK(std::memcmp(on_host[i].data(), on_device[i].data(), on_host[i].size() * 4) == 0);
    // Parameters and both states moved; gradients are read only.
    const bool gradient = i == 2 || i == 3;
    CHECK((on_host[i] == data[i]) == gradient);
  }
}

TEST_CASE("adam's operands are four equal groups", "[runtime][host_ops][adam]") {
  mp::sim::Workload w = adam_workload({2}, {});
  std::vector<float> x(2, 0.5f);
  std::vector<std::byte*> operands(4, reinterpret_cast<std::byte*>(x.data()));
  w.ops[0].inputs.pop_back();  // three groups: sgd's shape
  operands.pop_back();
  CHECK_THROWS_WITH(mp::runtime::run_host_op(w, w.ops[0], operands),
                    Catch::Contains("adam reads params, grads, exp_avgs and exp_avg_sqs"));
  w = adam_workload({2, 3}, {});
  std::swap(w.ops[0].inputs[2], w.ops[0].inputs[3]);  // grad of 3 against a param of 2
  std::vector<float> y(3, 0.5f);
  std::vector<std::byte*> eight(8, reinterpret_cast<std::byte*>(y.data()));
  CHECK_THROWS_WITH(mp::runtime::run_host_op(w, w.ops[0], eight),
                    Catch::Contains("differ in size"));
}
