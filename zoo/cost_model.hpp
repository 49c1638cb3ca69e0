#pragma once
// CostModel: the analytic time of every op of a workload on a device, so that networks can be
// planned for GPUs the user does not have. Each op's time is a roofline — the larger of its flops
// over the device's peak and its bytes over the memory bandwidth — scaled by an efficiency factor
// per layer type and phase, plus a fixed per-kernel overhead. The peak is the device's matrix rate
// for the step's precision for convolutions and matmuls, its FP32 vector rate for every other op
// (Note [Training precision] in zoo/precision.hpp). The factors are calibrated against real
// profiles (Note [Cost model calibration] in cost_model.cpp).
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
  /// (matrix_flops_per_s > 0).
  explicit CostModel(const Device& device, Precision precision = Precision::kFp32);

  /// Time of `op` with its default (fastest) algorithm, or with the memory-optimal one.
  [[nodiscard]] sim::Nanoseconds duration(const sim::Op& op, bool memory_optimal = false) const;

  /// Fills duration_ns of every op and of every alternative algorithm.
  void apply(sim::Workload& workload) const;

  /// The factors used for a layer type in a phase.
  [[nodiscard]] static Efficiency efficiency(sim::Layer layer, sim::Phase phase);

 private:
  const Device& device_;
  double matrix_flops_per_s_;  // convolutions and matmuls in the step's precision
};

}  // namespace memplan::zoo
