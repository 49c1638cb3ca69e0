#pragma once
// Host ops: the update ops a backend runs on the CPU when a plan updates on the host (kHostRun on
// the host stream, Note [Host placement] in core/plan.hpp), over host slots instead of device
// buffers. One CPU loop per update rule, shared by the host backend's device-side update kernel
// and both backends' host ops, so that an update on the host and one on the (host) device give the
// same bits.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/workload.hpp"

namespace memplan::runtime {

/// Learning rate, momentum and weight decay of the `sgd` op when its attributes do not say.
struct SgdDefaults {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

/// SGD with momentum (PyTorch's rule): v = mu*v + g + wd*w; w -= lr*v.
void sgd_momentum_update(std::int64_t n, float lr, float momentum, float weight_decay, float* w,
                         const float* grad, float* velocity);

/// The scalars of one Adam step (torch.optim.Adam, foreach=False, not capturable), from the `adam`
/// op's attributes: `lr` (default 1e-3), `betas` (0.9, 0.999), `eps` (1e-8), `weight_decay` (0)
/// and `step` (the step count after this update: 1 for the one recorded step). As PyTorch does,
/// the bias corrections are computed in double from the step count and every scalar is rounded
/// to float once, so a CPU loop and a CUDA kernel given the same AdamStep agree bit for bit.
struct AdamStep {
  float beta1_weight = 0.1f;           // 1 - beta1: exp_avg.lerp_(grad, 1 - beta1)
  float beta2 = 0.999f;                // exp_avg_sq.mul_(beta2)
  float beta2_weight = 0.001f;         // 1 - beta2: .addcmul_(grad, grad, value=1 - beta2)
  float weight_decay = 0.0f;           // grad = grad + weight_decay * param (when not 0)
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 - beta2^step)
  float eps = 1e-8f;                   // denom = sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
  float neg_step_size = -0.001f;       // -lr / (1 - beta1^step): param.addcdiv_(exp_avg, denom, ·)
};

/// The AdamStep of `op` (its attributes, PyTorch's defaults for those it lacks). Throws
/// BackendError for a step count below 1 or betas outside [0, 1).
AdamStep adam_step(const sim::Op& op);

/// One Adam step over n elements, PyTorch's rule with each operation rounded to float in its
/// order (no fused multiply-add): g' = g + wd*w (when wd != 0); m = m + (1-b1)*(g' - m);
/// v = v*b2 + ((1-b2)*g')*g'; w = w + (-step_size*m) / (sqrt(v)/bc2_sqrt + eps).
void adam_update(std::int64_t n, const AdamStep& s, float* w, const float* grad, float* exp_avg,
                 float* exp_avg_sq);

/// Runs update op `op` of `workload` on host memory: `operands` point at its inputs, in order
/// (for `sgd`: parameters, gradients, momenta; for `adam`: parameters, gradients, exp_avgs,
/// exp_avg_sqs), updated in place. Throws BackendError for an op
/// that is not an update the host runs, or operands that do not match.
void run_host_op(const sim::Workload& workload, const sim::Op& op,
                 const std::vector<std::byte*>& operands);

}  // namespace memplan::runtime
