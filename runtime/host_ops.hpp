#pragma once
// Host ops: the update ops a backend runs on the CPU when a plan updates on the host (kHostRun on
// the host stream, Note [Host placement] in sim/plan.hpp), over host slots instead of device
// buffers. One CPU loop per update rule, shared by the host backend's device-side update kernel
// and both backends' host ops, so that an update on the host and one on the (host) device give the
// same bits.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/workload.hpp"

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

/// Runs update op `op` of `workload` on host memory: `operands` point at its inputs, in order
/// (for `sgd`: parameters, gradients, momenta), updated in place. Throws BackendError for an op
/// that is not an update the host runs, or operands that do not match.
void run_host_op(const sim::Workload& workload, const sim::Op& op,
                 const std::vector<std::byte*>& operands);

}  // namespace memplan::runtime
