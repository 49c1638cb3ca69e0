// Whole-network correctness of the host backend, not against another run of the same kernels:
// resnet18 from the zoo (batch 2) run in-core on a HostDevice through the interpreter
// learns (its loss on a fixed batch falls over SGD steps), and the gradient it computes for a
// first-layer weight matches a finite difference of the loss through the whole network. Also
// the values of the element-wise sum behind `add` and gradient accumulation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/basic_plans.hpp"
#include "host_backend/host_device.hpp"
#include "host_backend/op_executor.hpp"
#include "runtime/initial_data.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/validation.hpp"
#include "sim/lowering.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;
using mp::sim::TensorId;

namespace {

mp::sim::Workload resnet18_at(std::int64_t side = 32) {
  const mp::zoo::ModelInfo* model = mp::zoo::find_model("resnet18");
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions options;
  options.batch = 2;
  options.input = {side, side};
  return mp::zoo::build_model(*model, options).workload;
}

std::vector<float> floats(const std::vector<std::byte>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::vector<std::byte> bytes_of(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// The loss tensor: the first output of the forward softmax_cross_entropy.
TensorId loss_tensor(const mp::sim::Workload& w) {
  for (const mp::sim::Tensor& t : w.tensors) {
    if (t.kind == mp::sim::TensorKind::kActivation && mp::runtime::compared_by_validation(w, t)) {
      return t.id;
    }
  }
  FAIL("no loss tensor");
  return mp::sim::kNoTensor;
}

/// The sgd op: params, grads and momentum, three equal groups.
const mp::sim::Op& sgd_op(const mp::sim::Workload& w) {
  const auto it = std::find_if(w.ops.begin(), w.ops.end(), [](const mp::sim::Op& op) {
    return op.layer == mp::sim::Layer::kSgd;
  });
  REQUIRE(it != w.ops.end());
  REQUIRE(it->inputs.size() % 3 == 0);
  return *it;
}

float run_for_loss(mp::host_backend::HostDevice& device, const mp::sim::Workload& w,
                   const mp::sim::Program& program) {
  REQUIRE(mp::runtime::run_program(device, w, program).feasible);
  const auto loss = floats(device.tensor_bytes(loss_tensor(w)));
  REQUIRE(loss.size() == 1);
  return loss[0];
}

constexpr mp::sim::Bytes kCap = mp::sim::Bytes{4} << 30;  // pages only where tensors are placed

}  // namespace

TEST_CASE("add and grad_accumulate write the element-wise sum of their inputs",
          "[host_backend][add]") {
  mp::sim::Workload w;
  for (const char* name : {"a", "b", "c", "y"}) {
    mp::sim::Tensor t;
    t.id = static_cast<TensorId>(w.tensors.size());
    t.name = name;
    t.shape = {2, 3};
    t.dtype = "float32";
    t.bytes = 24;
    w.tensors.push_back(t);
  }
  auto op = [&](const char* layer, mp::sim::Phase phase, std::vector<TensorId> in) {
    mp::sim::Op o;
    o.id = static_cast<mp::sim::OpId>(w.ops.size());
    o.name = layer;
    o.layer = mp::sim::LayerType::named(layer);
    o.phase = phase;
    o.inputs = std::move(in);
    o.outputs = {TensorId{3}};
    w.ops.push_back(o);
    return o.id;
  };
  const auto add2 = op("add", mp::sim::Phase::kForward, {TensorId{0}, TensorId{1}});
  const auto add3 = op("add", mp::sim::Phase::kForward, {TensorId{0}, TensorId{1}, TensorId{2}});
  const auto acc3 =
      op("grad_accumulate", mp::sim::Phase::kBackward, {TensorId{0}, TensorId{1}, TensorId{2}});
  const auto acc1 = op("add", mp::sim::Phase::kBackward, {TensorId{2}});
  // Values whose sums are exact in float32, so the expected sums are exact too.
  std::vector<float> a{1.0f, -2.0f, 0.5f, 1024.0f, -0.0f, 3.25f};
  const std::vector<float> b{0.25f, 2.0f, -1.5f, 1.0f, -0.0f, -7.0f};
  const std::vector<float> c{8.0f, 0.125f, 1.0f, -2048.0f, 0.0f, 0.75f};
  std::vector<float> y(6, 99.0f);
  mp::host_backend::OpExecutor executor(w);
  auto run = [&](mp::sim::OpId id, std::vector<void*> operands) {
    executor.run(w.op(id), operands);
  };
  const std::vector<float> ab{1.25f, 0.0f, -1.0f, 1025.0f, -0.0f, -3.75f};
  const std::vector<float> abc{9.25f, 0.125f, 0.0f, -1023.0f, 0.0f, -3.0f};
  auto same = [](const std::vector<float>& x, const std::vector<float>& z) {
    return std::memcmp(x.data(), z.data(), x.size() * 4) == 0;
  };
  run(add2, {a.data(), const_cast<float*>(b.data()), y.data()});
  CHECK(same(y, ab));  // -0 + -0 is -0
  run(add3, {a.data(), const_cast<float*>(b.data()), const_cast<float*>(c.data()), y.data()});
  CHECK(same(y, abc));
  std::fill(y.begin(), y.end(), 99.0f);
  run(acc3, {a.data(), const_cast<float*>(b.data()), const_cast<float*>(c.data()), y.data()});
  CHECK(same(y, abc));
  run(acc1, {const_cast<float*>(c.data()), y.data()});  // one incoming gradient: a copy
  CHECK(same(y, c));
  // In place (the residual add writes into its first input, as the zoo's traces have it).
  run(add3, {a.data(), const_cast<float*>(b.data()), const_cast<float*>(c.data()), a.data()});
  CHECK(same(a, abc));
}

TEST_CASE("an average pool without a recorded window pools as its extents define (imported steps)",
          "[host_backend][pool]") {
  // The Kineto importer records avg_pool2d [N, C, 4, 4] -> [N, C, 1, 1] (torchvision's
  // AdaptiveAvgPool2d) with no kernel, and its backward reading dy alone. PyTorch's adaptive
  // average pooling to 1x1 is the mean of each plane; to 2x2 it is the mean of each 2x2 block
  // (kernel = stride = 4 / 2). Backward spreads dy / (window size) over each window.
  mp::sim::Workload w;
  auto tensor = [&](const char* name, std::vector<std::int64_t> shape) {
    mp::sim::Tensor t;
    t.id = static_cast<TensorId>(w.tensors.size());
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = "float32";
    std::int64_t n = 4;
    for (std::int64_t e : t.shape) n *= e;
    t.bytes = n;
    w.tensors.push_back(t);
    return t.id;
  };
  const TensorId x = tensor("x", {1, 1, 4, 4});
  const TensorId y1 = tensor("y1", {1, 1, 1, 1});
  const TensorId y2 = tensor("y2", {1, 1, 2, 2});
  const TensorId dx = tensor("dx", {1, 1, 4, 4});
  auto op = [&](mp::sim::Phase phase, std::vector<TensorId> in, TensorId out) {
    mp::sim::Op o;
    o.id = static_cast<mp::sim::OpId>(w.ops.size());
    o.name = "avg_pool2d_" + std::to_string(mp::sim::value(o.id));
    o.layer = mp::sim::LayerType::named("avg_pool2d");
    o.phase = phase;
    o.inputs = std::move(in);
    o.outputs = {out};
    w.ops.push_back(o);
    return o.id;
  };
  const auto global = op(mp::sim::Phase::kForward, {x}, y1);
  const auto blocks = op(mp::sim::Phase::kForward, {x}, y2);
  const auto global_bwd = op(mp::sim::Phase::kBackward, {y1}, dx);  // reads dy only
  const auto blocks_bwd = op(mp::sim::Phase::kBackward, {y2, x}, dx);
  std::vector<float> xs(16);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);  // row-major 0..15
  std::vector<float> out1(1, -1.0f);
  std::vector<float> out2(4, -1.0f);
  mp::host_backend::OpExecutor executor(w);
  executor.run(w.op(global), std::vector<void*>{xs.data(), out1.data()});
  CHECK(out1[0] == 7.5f);  // (0 + ... + 15) / 16
  executor.run(w.op(blocks), std::vector<void*>{xs.data(), out2.data()});
  // Block (0,0) holds 0, 1, 4, 5: 2.5; (0,1) 2, 3, 6, 7: 4.5; (1,0) 8, 9, 12, 13: 10.5; (1,1) 12.5.
  CHECK(out2 == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f});
  std::vector<float> dy1{16.0f};
  std::vector<float> grad(16, -1.0f);
  executor.run(w.op(global_bwd), std::vector<void*>{dy1.data(), grad.data()});
  CHECK(grad == std::vector<float>(16, 1.0f));  // 16 / 16 to every element
  std::vector<float> dy2{4.0f, 8.0f, 12.0f, 16.0f};
  executor.run(w.op(blocks_bwd), std::vector<void*>{dy2.data(), xs.data(), grad.data()});
  // Each 2x2 block gets its dy / 4: rows 0-1 are 1 1 2 2, rows 2-3 are 3 3 4 4.
  CHECK(grad == std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST_CASE("resnet18 on the host learns a fixed batch: the loss falls over SGD steps",
          "[host_backend][training]") {
  const mp::sim::Workload w = resnet18_at();
  const mp::sim::Op& sgd = sgd_op(w);
  // Swap-all, so that the steps also go through swapped and prefetched feature maps.
  const mp::sim::Program program = mp::sim::lower(w, mp::sim::swap_all_plan(w));
  mp::host_backend::HostDevice device(kCap, 3);
  std::vector<float> losses;
  for (int step = 0; step < 6; ++step) {
    losses.push_back(run_for_loss(device, w, program));
    // The next step starts from this step's updated parameters and momentum (the inputs and
    // labels are the seed's every time: a fixed batch).
    const std::size_t k = sgd.inputs.size() / 3;
    for (std::size_t i = 0; i < k; ++i) {
      for (TensorId t : {sgd.inputs[i], sgd.inputs[2 * k + i]}) {
        device.set_initial_bytes(w, t, device.tensor_bytes(t));
      }
    }
  }
  CAPTURE(losses);
  for (float l : losses) REQUIRE(std::isfinite(l));
  // Cross-entropy over the zoo's 1000 classes starts near ln(1000) = 6.9 ...
  CHECK(losses.front() > 4.0f);
  CHECK(losses.front() < 10.0f);
  // ... and SGD on one batch of two drives it down.
  CHECK(losses.back() < 0.5f * losses.front());
  CHECK(losses[1] < losses[0]);
}

TEST_CASE("resnet18's gradient of a first-layer weight is the finite difference of its loss",
          "[host_backend][training]") {
  // At 64x64 layer4's batch-norm sees 2x2 positions of 2 samples. (At 32x32 it normalises two
  // values per channel, whose normalised values are +-1 whatever they are: the loss is then a
  // step-like function of the weights, steep in a band narrower than any useful h.)
  const mp::sim::Workload w = resnet18_at(64);
  const mp::sim::Op& sgd = sgd_op(w);
  const std::size_t k = sgd.inputs.size() / 3;
  // The first parameter the first forward op reads: conv1's filter, the farthest from the loss.
  const mp::sim::Op& first = w.ops.front();
  const auto param =
      std::find(sgd.inputs.begin(), sgd.inputs.begin() + static_cast<long>(k), first.inputs.at(1));
  REQUIRE(param != sgd.inputs.begin() + static_cast<long>(k));
  const TensorId weight = *param;
  const TensorId gradient = sgd.inputs[k + static_cast<std::size_t>(param - sgd.inputs.begin())];
  CAPTURE(w.tensor(weight).name, w.tensor(gradient).name);

  const mp::sim::Program program = mp::sim::lower(w, mp::sim::in_core_plan(w));
  mp::host_backend::HostDevice device(kCap, 5);
  run_for_loss(device, w, program);
  const std::vector<float> analytic = floats(device.tensor_bytes(gradient));
  // The weight's value in that run: the seed's (tensor_bytes would give it after the update).
  std::vector<std::byte> initial(static_cast<std::size_t>(w.tensor(weight).bytes));
  mp::runtime::fill_initial_data(w, w.tensor(weight), 5, initial.data());
  const std::vector<float> start = floats(initial);
  REQUIRE(analytic.size() == start.size());

  // The three largest gradients (the clearest signal over the loss's float32 rounding).
  std::vector<std::size_t> order(start.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                    [&](std::size_t a, std::size_t b) {
                      return std::fabs(analytic[a]) > std::fabs(analytic[b]);
                    });
  const float h = 1e-3f;
  for (int n = 0; n < 3; ++n) {
    const std::size_t j = order[static_cast<std::size_t>(n)];
    std::vector<float> perturbed = start;
    perturbed[j] = start[j] + h;
    device.set_initial_bytes(w, weight, bytes_of(perturbed));
    const double plus = run_for_loss(device, w, program);
    perturbed[j] = start[j] - h;
    device.set_initial_bytes(w, weight, bytes_of(perturbed));
    const double minus = run_for_loss(device, w, program);
    const double numeric = (plus - minus) / (2.0 * static_cast<double>(h));
    CAPTURE(j, numeric, analytic[j]);
    CHECK(std::fabs(analytic[j]) > 1e-3);
    CHECK(numeric == Approx(analytic[j]).epsilon(0.03));
  }
}
