#include "runtime/host_ops.hpp"

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

void run_host_op(const sim::Workload& workload, const sim::Op& op,
                 const std::vector<std::byte*>& operands) {
  if (op.phase != sim::Phase::kUpdate || op.layer != sim::Layer::kSgd) {
    fail(op, "the host runs update ops only (sgd)");
  }
  if (operands.size() != op.inputs.size() || op.inputs.size() % 3 != 0) {
    fail(op, "sgd reads params, grads and momentum buffers (3 groups)");
  }
  const SgdDefaults d;
  const float lr = attr_f(op, "lr", d.lr);
  const float momentum = attr_f(op, "momentum", d.momentum);
  const float weight_decay = attr_f(op, "weight_decay", d.weight_decay);
  const std::size_t k = op.inputs.size() / 3;
  auto f32 = [&](std::size_t i) { return reinterpret_cast<float*>(operands[i]); };
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(workload.tensor(op.inputs[i]));
    if (elements(workload.tensor(op.inputs[k + i])) != n ||
        elements(workload.tensor(op.inputs[2 * k + i])) != n) {
      fail(op, "param, grad and momentum " + std::to_string(i) + " differ in size");
    }
    sgd_momentum_update(n, lr, momentum, weight_decay, f32(i), f32(k + i), f32(2 * k + i));
  }
}

}  // namespace memplan::runtime
