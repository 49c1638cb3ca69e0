#include "runtime/host_ops.hpp"

#include <cmath>
#include <string>

#include "runtime/op_call.hpp"

namespace memplan::runtime {

void sgd_momentum_update(std::int64_t n, float lr, float momentum, float weight_decay, float* w,
                         const float* grad, float* velocity) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + weight_decay * w[i];
    velocity[i] = momentum * velocity[i] + g;
    w[i] -= lr * velocity[i];
  }
}

AdamStep adam_step(const sim::Op& op) {
  // Python floats, as torch.optim.Adam's scalars are: doubles until the kernel takes them.
  const double lr = attr_d(op, "lr", 0, 1e-3);
  const double beta1 = attr_d(op, "betas", 0, 0.9);
  const double beta2 = attr_d(op, "betas", 1, 0.999);
  const double step = attr_d(op, "step", 0, 1.0);
  if (!(step >= 1.0)) fail(op, "adam's step count (attribute 'step') must be at least 1");
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0)) {
    fail(op, "adam's betas must lie in [0, 1)");
  }
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  AdamStep s;
  s.beta1_weight = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.beta2_weight = static_cast<float>(1.0 - beta2);
  s.weight_decay = static_cast<float>(attr_d(op, "weight_decay", 0, 0.0));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(attr_d(op, "eps", 0, 1e-8));
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

void adam_update(std::int64_t n, const AdamStep& s, float* w, const float* grad, float* exp_avg,
                 float* exp_avg_sq) {
  for (std::int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (s.weight_decay != 0.0f) {
      const float decay = s.weight_decay * w[i];
      g = g + decay;
    }
    const float diff = g - exp_avg[i];
    const float step_m = s.beta1_weight * diff;
    const float m = exp_avg[i] + step_m;
    exp_avg[i] = m;
    const float scaled = s.beta2_weight * g;
    const float square = scaled * g;
    const float decayed = exp_avg_sq[i] * s.beta2;
    const float v = decayed + square;
    exp_avg_sq[i] = v;
    const float root = std::sqrt(v);
    const float corrected = root / s.bias_correction2_sqrt;
    const float denom = corrected + s.eps;
    const float numerator = s.neg_step_size * m;
    const float delta = numerator / denom;
    w[i] = w[i] + delta;
  }
}

namespace {

// [params, grads, momenta]: three equal groups.
void run_sgd(const sim::Workload& workload, const sim::Op& op,
             const std::vector<std::byte*>& operands) {
  const std::size_t k = update_group_size(workload, op);
  const SgdDefaults d;
  const float lr = attr_f(op, "lr", d.lr);
  const float momentum = attr_f(op, "momentum", d.momentum);
  const float weight_decay = attr_f(op, "weight_decay", d.weight_decay);
  auto f32 = [&](std::size_t i) { return reinterpret_cast<float*>(operands[i]); };
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(workload.tensor(op.inputs[i]));
    sgd_momentum_update(n, lr, momentum, weight_decay, f32(i), f32(k + i), f32(2 * k + i));
  }
}

// [params, grads, exp_avgs, exp_avg_sqs]: four equal groups.
void run_adam(const sim::Workload& workload, const sim::Op& op,
              const std::vector<std::byte*>& operands) {
  const std::size_t k = update_group_size(workload, op);
  const AdamStep s = adam_step(op);
  auto f32 = [&](std::size_t i) { return reinterpret_cast<float*>(operands[i]); };
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(workload.tensor(op.inputs[i]));
    adam_update(n, s, f32(i), f32(k + i), f32(2 * k + i), f32(3 * k + i));
  }
}

}  // namespace

void run_host_op(const sim::Workload& workload, const sim::Op& op,
                 const std::vector<std::byte*>& operands) {
  const bool sgd = op.layer == sim::Layer::kSgd;
  if (op.phase != sim::Phase::kUpdate || (!sgd && op.layer != sim::Layer::kAdam)) {
    fail(op, "the host runs update ops only (sgd, adam)");
  }
  if (operands.size() != op.inputs.size()) fail(op, "one operand per input");
  if (sgd) {
    run_sgd(workload, op, operands);
  } else {
    run_adam(workload, op, operands);
  }
}

}  // namespace memplan::runtime
