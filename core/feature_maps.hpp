#pragma once
// Feature maps: the activations that forward writes and backward reads. They are what a plan
// decides about (keep, swap, recompute, encode): between their last forward use and their first
// backward use they only take up memory.
#include <vector>

#include "core/workload.hpp"

namespace memplan::sim {

struct FeatureMap {
  TensorId tensor = kNoTensor;
  std::vector<OpId> forward_uses;   // ops of the forward phase that read it, in issue order
  std::vector<OpId> backward_uses;  // ops of the backward phase that read it, in issue order
};

/// Feature maps in tensor id order. Requires a validated workload.
std::vector<FeatureMap> find_feature_maps(const Workload& workload);

}  // namespace memplan::sim
