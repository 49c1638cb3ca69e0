// Property: random small networks (an optional conv-relu-maxpool block, then linear-relu layers,
// biases or not, ReLUs in place or not, softmax cross-entropy, SGD) × random plans (keep, swap,
// recompute, binarize where Gist allows it, fp16/fp10) that the simulator says fit under a cap
// just above their need: every one runs under that cap on the HostDevice, with the simulator's
// peak and the in-core gradients, loss and updated weights — bitwise, or for plans that narrow
// maps within validation's tolerance (Note [Validation tolerance]). 200 cases by default;
// MEMPLAN_PROPERTY_CASES=N runs more.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "host_backend/host_device.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/validation.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace mp = memplan;
using mp::sim::Phase;
using mp::sim::TensorId;
using mp::sim::TensorKind;

namespace {

class NetworkBuilder {
 public:
  explicit NetworkBuilder(std::mt19937_64& rng) : rng_(rng) {
    w_.provenance.source = "hand-written";
    w_.device.name = "random";
    w_.device.memory_bytes = std::int64_t{1} << 30;
  }

  TensorId tensor(const std::string& name, std::vector<std::int64_t> shape, TensorKind kind,
                  const std::string& dtype = "float32") {
    mp::sim::Tensor t;
    t.id = static_cast<TensorId>(w_.tensors.size());
    t.name = name;
    t.kind = kind;
    t.dtype = dtype;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    t.bytes = n * (dtype == "int64" ? 8 : 4);
    t.shape = std::move(shape);
    w_.tensors.push_back(t);
    return t.id;
  }

  mp::sim::OpId op(const std::string& name, const std::string& layer, Phase phase,
                   std::vector<TensorId> in, std::vector<TensorId> out,
                   mp::sim::Attributes attributes = {},
                   mp::sim::OpId differentiates = mp::sim::kNoOp) {
    mp::sim::Op o;
    o.id = static_cast<mp::sim::OpId>(w_.ops.size());
    o.name = name;
    o.layer = mp::sim::LayerType::named(layer);
    o.phase = phase;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.attributes = std::move(attributes);
    o.differentiates = differentiates;
    o.duration_ns = std::uniform_int_distribution<std::int64_t>(1000, 20000)(rng_);
    for (TensorId t : o.outputs) w_.tensors[static_cast<std::size_t>(t)].producer = o.id;
    w_.ops.push_back(o);
    return o.id;
  }

  mp::sim::Workload& workload() { return w_; }
  mp::sim::Tensor& at(TensorId t) { return w_.tensors[static_cast<std::size_t>(t)]; }

 private:
  std::mt19937_64& rng_;
  mp::sim::Workload w_;
};

struct Layer {
  mp::sim::OpId fwd;
  TensorId in, weight, bias, out;  // bias -1 when none
};

mp::sim::Workload random_network(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) {
    return static_cast<std::int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  auto coin = [&] { return std::bernoulli_distribution(0.5)(rng); };
  NetworkBuilder b(rng);
  const std::int64_t n = pick(1, 4);
  const bool conv = coin();
  std::vector<TensorId> params;
  std::map<TensorId, TensorId> grad_of;
  TensorId x = mp::sim::kNoTensor, features = mp::sim::kNoTensor;
  std::int64_t width = 0;
  struct Conv {
    mp::sim::OpId conv, relu, pool;
    TensorId w, bias, conv_out, relu_out, pool_out, indices;
  } c{};
  const mp::sim::Attributes conv_attrs{
      {"kernel", {3, 3}}, {"stride", {1, 1}}, {"padding", {1, 1}}, {"groups", {1}}};
  const mp::sim::Attributes pool_attrs{{"kernel", {2, 2}}, {"stride", {2, 2}}, {"padding", {0, 0}}};
  if (conv) {
    const std::int64_t ch = pick(1, 3), k = pick(1, 4), hw = 2 * pick(2, 4);
    x = b.tensor("x", {n, ch, hw, hw}, TensorKind::kInput);
    c.w = b.tensor("w_conv", {k, ch, 3, 3}, TensorKind::kParameter);
    params.push_back(c.w);
    c.bias = coin() ? b.tensor("b_conv", {k}, TensorKind::kParameter) : mp::sim::kNoTensor;
    std::vector<TensorId> conv_in{x, c.w};
    if (c.bias != mp::sim::kNoTensor) {
      params.push_back(c.bias);
      conv_in.push_back(c.bias);
    }
    c.conv_out = b.tensor("conv_out", {n, k, hw, hw}, TensorKind::kActivation);
    c.conv = b.op("conv", "conv2d", Phase::kForward, conv_in, {c.conv_out}, conv_attrs);
    c.relu_out = b.tensor("conv_relu_out", {n, k, hw, hw}, TensorKind::kActivation);
    if (coin()) b.at(c.relu_out).in_place_of = c.conv_out;
    c.relu = b.op("conv_relu", "relu", Phase::kForward, {c.conv_out}, {c.relu_out});
    c.pool_out = b.tensor("pool_out", {n, k, hw / 2, hw / 2}, TensorKind::kActivation);
    c.indices = b.tensor("pool_indices", {n, k, hw / 2, hw / 2}, TensorKind::kActivation, "int64");
    c.pool = b.op("pool", "max_pool2d", Phase::kForward, {c.relu_out}, {c.pool_out, c.indices},
                  pool_attrs);
    features = c.pool_out;
    width = k * (hw / 2) * (hw / 2);
  } else {
    width = pick(2, 24);
    x = b.tensor("x", {n, width}, TensorKind::kInput);
    features = x;
  }
  const std::int64_t layers = pick(1, 4);
  const std::int64_t classes = pick(2, 6);
  std::vector<Layer> linear;
  std::vector<std::pair<mp::sim::OpId, TensorId>> relus;  // (op, output) after linear i
  TensorId a = features;
  for (std::int64_t i = 0; i < layers; ++i) {
    const bool last = i + 1 == layers;
    const std::int64_t out = last ? classes : pick(2, 24);
    const std::string s = std::to_string(i);
    const TensorId wi = b.tensor("w" + s, {out, width}, TensorKind::kParameter);
    params.push_back(wi);
    const TensorId bi =
        coin() ? b.tensor("b" + s, {out}, TensorKind::kParameter) : mp::sim::kNoTensor;
    std::vector<TensorId> fc_in{a, wi};
    if (bi != mp::sim::kNoTensor) {
      params.push_back(bi);
      fc_in.push_back(bi);
    }
    const TensorId h = b.tensor(last ? "logits" : "h" + s, {n, out}, TensorKind::kActivation);
    linear.push_back({b.op("fc" + s, "linear", Phase::kForward, fc_in, {h}), a, wi, bi, h});
    a = h;
    if (!last) {
      const TensorId r = b.tensor("a" + s, {n, out}, TensorKind::kActivation);
      if (coin()) b.at(r).in_place_of = h;
      relus.emplace_back(b.op("relu" + s, "relu", Phase::kForward, {h}, {r}), r);
      a = r;
    }
    width = out;
  }
  const TensorId labels = b.tensor("labels", {n}, TensorKind::kInput, "int64");
  const TensorId loss = b.tensor("loss", {1}, TensorKind::kActivation);
  const TensorId probs = b.tensor("probs", {n, classes}, TensorKind::kActivation);
  const auto loss_op =
      b.op("loss", "softmax_cross_entropy", Phase::kForward, {a, labels}, {loss, probs});

  // Backward, in reverse.
  TensorId d = b.tensor("d_logits", {n, classes}, TensorKind::kGradient);
  b.op("loss_bwd", "softmax_cross_entropy", Phase::kBackward, {probs, labels}, {d}, {}, loss_op);
  for (std::int64_t i = layers - 1; i >= 0; --i) {
    const Layer& l = linear[static_cast<std::size_t>(i)];
    const std::string s = std::to_string(i);
    const TensorId dx = l.in == x ? mp::sim::kNoTensor
                                  : b.tensor("d_in" + s, b.at(l.in).shape, TensorKind::kGradient);
    const TensorId g = b.tensor("g_w" + s, b.at(l.weight).shape, TensorKind::kGradient);
    grad_of[l.weight] = g;
    std::vector<TensorId> outs{g};
    if (dx != mp::sim::kNoTensor) outs.insert(outs.begin(), dx);
    if (l.bias != mp::sim::kNoTensor) {
      grad_of[l.bias] = b.tensor("g_b" + s, b.at(l.bias).shape, TensorKind::kGradient);
      outs.push_back(grad_of[l.bias]);
    }
    b.op("fc" + s + "_bwd", "linear", Phase::kBackward, {d, l.in, l.weight}, outs, {}, l.fwd);
    if (dx == mp::sim::kNoTensor) break;
    d = dx;
    if (i > 0) {
      const auto& [relu_op, r] = relus[static_cast<std::size_t>(i - 1)];
      const TensorId dh =
          b.tensor("d_h" + std::to_string(i - 1), b.at(r).shape, TensorKind::kGradient);
      b.op("relu" + std::to_string(i - 1) + "_bwd", "relu", Phase::kBackward, {d, r}, {dh}, {},
           relu_op);
      d = dh;
    }
  }
  if (conv) {
    // d is the gradient of pool_out (flattened by the first linear layer).
    const TensorId d_relu =
        b.tensor("d_conv_relu_out", b.at(c.relu_out).shape, TensorKind::kGradient);
    b.op("pool_bwd", "max_pool2d", Phase::kBackward, {d, c.relu_out, c.indices}, {d_relu},
         pool_attrs, c.pool);
    const TensorId d_conv = b.tensor("d_conv_out", b.at(c.conv_out).shape, TensorKind::kGradient);
    b.op("conv_relu_bwd", "relu", Phase::kBackward, {d_relu, c.relu_out}, {d_conv}, {}, c.relu);
    grad_of[c.w] = b.tensor("g_conv", b.at(c.w).shape, TensorKind::kGradient);
    std::vector<TensorId> outs{grad_of[c.w]};
    if (c.bias != mp::sim::kNoTensor) {
      grad_of[c.bias] = b.tensor("g_b_conv", b.at(c.bias).shape, TensorKind::kGradient);
      outs.push_back(grad_of[c.bias]);
    }
    b.op("conv_bwd", "conv2d", Phase::kBackward, {d_conv, x, c.w}, outs, conv_attrs, c.conv);
  }
  std::vector<TensorId> sgd_in = params;
  for (TensorId p : params) sgd_in.push_back(grad_of.at(p));
  for (TensorId p : params) {
    sgd_in.push_back(b.tensor("m_" + b.at(p).name, b.at(p).shape, TensorKind::kOptimizerState));
  }
  b.op("sgd", "sgd", Phase::kUpdate, sgd_in, {});
  mp::sim::validate(b.workload(), "random network");
  return b.workload();
}

mp::sim::Plan random_plan(const mp::sim::Workload& w, std::mt19937_64& rng) {
  mp::sim::Plan plan = mp::sim::in_core_plan(w);
  plan.policy = "random";
  for (auto& decision : plan.decisions) {
    const mp::sim::Decision before = decision;
    switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
      case 0:
        break;
      case 1:
        decision.action = mp::sim::Action::kSwap;
        break;
      case 2:
        decision.action = mp::sim::Action::kRecompute;
        break;
      case 3:
        decision.action = mp::sim::Action::kEncode;
        decision.encoding = mp::sim::Encoding::kBinarize;
        break;
      default:
        // fp16 or fp10. Not fp8: its 4 exponent bits flush activations below 2^-10 to zero, which
        // flips their ReLU masks in backward; on these small networks (weights and activations of
        // a few hundredths) that moved the gradients beyond any useful bound in 4 of 4206 fp8
        // plans (seeds 1000-10999 and 20000-29999), which validation then reports as a mismatch.
        decision.action = mp::sim::Action::kEncode;
        decision.encoding = std::bernoulli_distribution(0.5)(rng) ? mp::sim::Encoding::kFp16
                                                                  : mp::sim::Encoding::kFp10;
        break;
    }
    try {
      mp::sim::validate_plan(plan, w, "random plan");
    } catch (const std::exception&) {
      decision = before;  // not allowed for this map: keep it
    }
  }
  return plan;
}

/// The tensors whose values must not depend on the plan, by name, and the first that differs.
std::string first_difference(const mp::sim::Workload& w, const mp::host_backend::HostDevice& a,
                             const mp::host_backend::HostDevice& b) {
  for (const auto& t : w.tensors) {
    if (t.kind == TensorKind::kGradient || t.kind == TensorKind::kParameter ||
        t.kind == TensorKind::kOptimizerState || t.name == "loss") {
      const auto x = a.tensor_bytes(t.id);
      if (x.empty() || x != b.tensor_bytes(t.id)) return t.name;
    }
  }
  return {};
}

std::string describe(const mp::sim::Workload& w, const mp::sim::Plan& plan) {
  std::string out;
  for (const auto& d : plan.decisions) {
    out += w.tensor(d.tensor).name + ":" + mp::sim::action_label(d.action, d.encoding) + " ";
  }
  return out;
}

}  // namespace

TEST_CASE("random networks under random plans that fit run with in-core gradients",
          "[host_backend][runtime][property]") {
  // scripts/validate-many sets both: how many cases, and the seed of the first (case k uses
  // seed first + k, so a failing case is re-run alone with MEMPLAN_PROPERTY_SEED=its seed).
  int cases = 200;
  if (const char* env = std::getenv("MEMPLAN_PROPERTY_CASES")) cases = std::atoi(env);
  std::uint64_t first = 0;
  if (const char* env = std::getenv("MEMPLAN_PROPERTY_SEED"))
    first = std::strtoull(env, nullptr, 10);
  std::size_t non_trivial = 0;
  std::size_t narrowed = 0;  // plans with precision reduction, held to the tolerance
  double worst_ratio = 0;
  for (int k = 0; k < cases; ++k) {
    const std::uint64_t seed = first + static_cast<std::uint64_t>(k);
    INFO("case " << k << " (MEMPLAN_PROPERTY_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    const mp::sim::Workload w = random_network(rng);
    const mp::sim::Plan plan = random_plan(w, rng);
    mp::sim::Machine machine = mp::sim::make_machine(w.device);

    const mp::sim::Program reference_program = mp::sim::lower(w, mp::sim::in_core_plan(w));
    mp::host_backend::HostDevice reference(machine.memory_bytes, seed);
    REQUIRE(mp::runtime::run_program(reference, w, reference_program).feasible);

    const mp::sim::Program program = mp::sim::lower(w, plan);
    mp::sim::Engine engine;
    machine.memory_bytes = engine.run(program, machine).peak_reserved_bytes +
                           std::uniform_int_distribution<std::int64_t>(0, 4)(rng) * 512;
    const mp::sim::Timeline& predicted = engine.run(program, machine);
    if (!predicted.feasible) continue;  // only plans the simulator says fit
    const auto counts = plan.action_counts();
    non_trivial += counts[0] != plan.decisions.size() ? 1 : 0;

    mp::host_backend::HostDevice device(machine.memory_bytes, seed);
    const mp::sim::Timeline measured = mp::runtime::run_program(device, w, program);
    REQUIRE(measured.feasible);
    REQUIRE(measured.peak_bytes == predicted.peak_bytes);
    REQUIRE(measured.peak_reserved_bytes == predicted.peak_reserved_bytes);
    INFO("plan " << describe(w, plan));
    const mp::runtime::Tolerance tolerance = mp::runtime::tolerance_for(plan);
    if (tolerance.bitwise) {
      REQUIRE(first_difference(w, reference, device).empty());
    } else {
      ++narrowed;
      const auto c = mp::runtime::compare_runs(w, reference, device, tolerance);
      INFO("max relative L2 difference " << c.max_rel_diff << ", tolerance " << tolerance.relative);
      REQUIRE(c.match);
      worst_ratio = std::max(worst_ratio, c.max_rel_diff / tolerance.relative);
    }
  }
  CHECK(non_trivial >= static_cast<std::size_t>(cases) / 2);
  CHECK(narrowed >= static_cast<std::size_t>(cases) / 4);
  INFO("worst error / tolerance " << worst_ratio);
  CHECK(worst_ratio < 1.0);
}
