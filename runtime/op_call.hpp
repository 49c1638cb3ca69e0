#pragma once
// OpCall: one op as a backend's kernel table sees it — the op, its tensors and the device
// pointers of its inputs and outputs in the Program's order — with the decoding every backend
// needs the same way (traces/FORMAT.md): element counts, typed pointers, attributes with their
// defaults, which of [dx,] dw [, db] a linear or convolution backward writes, and one error
// format naming the op. The kernels themselves are each backend's (host_backend/op_executor.cpp,
// cuda_backend/cuda_op_executor.cpp and its *_ops.cpp).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/workload.hpp"

namespace memplan::runtime {

/// Elements of a tensor of this shape (1 for a scalar).
std::int64_t elements(const sim::Tensor& t);

inline float* f32(void* p) {
  return static_cast<float*>(p);
}
inline std::int64_t* i64(void* p) {
  return static_cast<std::int64_t*>(p);
}

/// Throws BackendError "op 'NAME' (LAYER, PHASE): what".
[[noreturn]] void fail(const sim::Op& op, std::string_view what);
/// Integer attribute `name` of `op` at index i (its last value when shorter), or `fallback`.
std::int64_t attr(const sim::Op& op, const char* name, std::size_t i, std::int64_t fallback);
/// First value of attribute `name` of `op` as a float, or `fallback`.
float attr_f(const sim::Op& op, const char* name, float fallback);
/// Attribute `name` of `op` at index i (its last value when shorter) as written, or `fallback`.
double attr_d(const sim::Op& op, const char* name, std::size_t i, double fallback);

/// An update op's operands: equal groups of the parameters, their gradients, then each optimizer
/// state (sgd: momenta; adam: exp_avgs, exp_avg_sqs), tensor i of every group the same size.
/// Returns the tensors per group; fails naming the groups, or the index whose sizes differ. Shared
/// by both backends' device kernels and the host's update, which refuse the same ops alike.
std::size_t update_group_size(const sim::Workload& workload, const sim::Op& op);

/// Which of [dx,] dw [, db] a linear or convolution backward op writes.
struct GradOutputs {
  bool dx = false;
  bool db = false;
};

struct OpCall {
  const sim::Workload& workload;
  const sim::Op& op;
  std::span<void* const> in;   // one per op.inputs
  std::span<void* const> out;  // one per op.outputs

  [[nodiscard]] const sim::Tensor& t_in(std::size_t i) const {
    return workload.tensor(op.inputs[i]);
  }
  [[nodiscard]] const sim::Tensor& t_out(std::size_t i) const {
    return workload.tensor(op.outputs[i]);
  }
  [[noreturn]] void fail(std::string_view what) const { runtime::fail(op, what); }
  [[nodiscard]] std::int64_t attr(const char* name, std::size_t i, std::int64_t fallback) const {
    return runtime::attr(op, name, i, fallback);
  }
  [[nodiscard]] float attr_f(const char* name, float fallback) const {
    return runtime::attr_f(op, name, fallback);
  }
  /// Which gradients a linear or convolution backward [dy, x, w] writes: the bias gradient when
  /// the forward op it differentiates has a bias (a third input), else when its last output is of
  /// rank 1; dx when there is one output more than dw [, db]. Fails on other operand counts.
  [[nodiscard]] GradOutputs grad_outputs() const;
  /// Rows of the last axis of `t` and that axis' extent (softmax, layer-norm, the loss).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> rows_of(const sim::Tensor& t) const;
};

/// "op 'NAME' (LAYER, PHASE)": where a kernel error or a missing kernel is.
std::string op_place(const sim::Op& op);

/// Throws sim::InputError naming `op`: `backend` ("host", "CUDA") has no kernel for its layer and
/// phase (a generic op, core/layer.hpp, never has one).
[[noreturn]] void no_kernel(const sim::Op& op, std::string_view backend);
/// Throws sim::InputError naming `op` when its attributes ask for what no backend's kernels do:
/// attention scores without the causal mask (causal 0, the zoo's vit_b16), which they always
/// apply.
void refuse_unsupported(const sim::Op& op, std::string_view backend);

/// The dropout mask's seed: a function of the forward op alone, so a recompute draws the same
/// mask as the first run, on every backend.
std::uint64_t dropout_seed(sim::OpId forward);

}  // namespace memplan::runtime
