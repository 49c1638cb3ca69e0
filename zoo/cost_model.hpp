#pragma once
// CostModel: the analytic time of every op of a workload on a device, so that networks can be
// planned for GPUs the user does not have. Each op's time is a roofline — the larger of its flops
// over the device's peak and its bytes over the memory bandwidth — scaled by an efficiency factor
// per layer type and phase, plus a fixed per-kernel overhead. The peak is the device's matrix rate
// for the step's precision for convolutions and matmuls, its FP32 vector rate for every other op
// (Note [Training precision] in zoo/precision.hpp). The factors are calibrated against real
// profiles (Note [Cost model calibration] in cost_model.cpp).
#include <cstdint>
#include <string_view>

#include "core/workload.hpp"
#include "zoo/devices.hpp"

namespace memplan::zoo {

/// How well one kind of layer uses the device: the fraction of peak flops it reaches when compute
/// bound and of memory bandwidth when memory bound.
struct Efficiency {
  double compute = 0.5;
  double memory = 0.5;
};

class CostModel {
 public:
  static constexpr std::string_view kName = "roofline-v1";

  /// `precision` picks the rate of convolutions and matmuls; the device must have it
  /// (matrix_flops_per_s > 0). `channels_last`: the activations are NHWC, else NCHW (Note
  /// [Tensor-core convolutions] in cost_model.cpp).
  explicit CostModel(const Device& device, Precision precision = Precision::kFp32,
                     bool channels_last = false);

  /// Time of `op` with its default (fastest) algorithm, or with the memory-optimal one.
  [[nodiscard]] sim::Nanoseconds duration(const sim::Op& op, bool memory_optimal = false) const;

  /// Fills duration_ns of every op and of every alternative algorithm; a linear layer whose
  /// features are not multiples of 16 bytes on the tensor cores at the share of its rate
  /// alignment() gives (Note [Unaligned GEMMs] in cost_model.cpp).
  void apply(sim::Workload& workload) const;

  /// The factors used for a layer type in a phase (the fused attention's: fused_attention(); a
  /// convolution on the tensor cores: tensor_core_convolution()).
  [[nodiscard]] static Efficiency efficiency(sim::Layer layer, sim::Phase phase);
  /// A convolution's factors on the tensor cores in a phase (Note [Tensor-core convolutions]).
  [[nodiscard]] static Efficiency tensor_core_convolution(sim::Layer layer, sim::Phase phase);
  /// The fused scaled_dot_product_attention's factors in a phase (Note [Cost model calibration]).
  [[nodiscard]] static Efficiency fused_attention(sim::Phase phase);
  /// The share of an aligned GEMM's rate a linear layer of `in_features` → `out_features` runs
  /// at in `precision` (Note [Unaligned GEMMs]): 1 on the CUDA cores (fp32) or when both are
  /// multiples of 16 bytes' elements, else the largest power of two dividing both, in bytes, over
  /// 16 (GPT-2's 50,257-word head in bf16: 2 / 16).
  [[nodiscard]] static double alignment(std::int64_t in_features, std::int64_t out_features,
                                        Precision precision);

 private:
  /// duration() with the compute efficiency multiplied by `compute_share`.
  [[nodiscard]] sim::Nanoseconds scaled_duration(const sim::Op& op, bool memory_optimal,
                                                 double compute_share) const;

  const Device& device_;
  Precision precision_;
  bool channels_last_;
  double matrix_flops_per_s_;  // convolutions and matmuls in the step's precision
};

}  // namespace memplan::zoo
