#pragma once
// OpExecutor: runs one trace op for real on host memory. A table maps the op's layer
// (core/layer.hpp) and phase to the Eigen kernels (layer_kernels.hpp, conv_kernels.hpp,
// transformer_kernels.hpp), decoding operands with runtime::OpCall and reading extents from the
// tensors' shapes and hyper-parameters from the op's attributes, following the trace conventions
// (traces/FORMAT.md): forward ops read inputs then weights; backward ops read the output gradient
// first, then the saved tensors, and write the gradients of their differentiable inputs; `add` in
// backward sums its inputs (gradient accumulation, also `grad_accumulate`); `sgd` reads params,
// grads and momentum buffers (three equal groups) and updates params and momentum in place; `adam`
// reads params, grads, exp_avgs and exp_avg_sqs (four equal groups) and updates params and both
// states in place (PyTorch's rule, runtime::adam_update: the same loop as a host update). Linear
// (weight [out, in], PyTorch's) and conv2d/conv3d take an optional bias as a third input; their
// backward writes [dx,] dw [, db]. Also batch_norm (training mode, saved mean and 1/std), relu6,
// avg_pool2d, adaptive_avg_pool (2D/3D), dropout (mask seeded by the forward op, so a recompute
// draws the same one) and concat along channels. A recompute is the forward op run again.
// Convolution scratch (im2col columns) is the executor's own host memory, not a device buffer: it
// is an implementation detail of these kernels, not the workload's workspace.
#include <cstdint>
#include <span>
#include <vector>

#include "core/workload.hpp"
#include "runtime/host_ops.hpp"
#include "runtime/op_call.hpp"

namespace memplan::host_backend {

using runtime::SgdDefaults;

class OpExecutor {
 public:
  explicit OpExecutor(const sim::Workload& workload) : w_(workload) {}

  /// Runs `op` with operand pointers in the Program's order: inputs, outputs (then a workspace
  /// buffer, ignored), by the kernel table's entry for its layer and phase. Throws sim::InputError
  /// naming the op when there is none (a generic op, a layer the host has no kernel for), and
  /// runtime::BackendError naming it for shapes it cannot use.
  void run(const sim::Op& op, std::span<void* const> operands);

 private:
  const sim::Workload& w_;
  std::vector<float> scratch_;  // convolution columns
};

}  // namespace memplan::host_backend
