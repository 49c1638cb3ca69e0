#pragma once
// Feature maps: the activations that forward writes and backward reads. They are what a plan
// decides about (keep, swap, recompute, encode): between their last forward use and their first
// backward use they only take up memory.
//
// Note [Feature maps of micro-batches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A step with gradient accumulation runs forward and backward passes alternately, one pair per
// micro-batch, then the update (memplan.torch.capture records it so). Phases are per op, not per
// step: a map micro-batch i's forward writes is read by backward pass i, and its forward uses are
// the forward reads before that; it goes and comes back between them as in a step of one pass.
// The next micro-batch's forward pass comes after its backward use. A tensor that a forward op
// reads again after a backward op has read it (a hidden state carried to the next micro-batch,
// truncated backpropagation through time) is no feature map: forward needs it again after
// backward, so no gap between its forward and backward uses exists for a plan to use, and a map
// brought back lossily (an encoding) would hand that forward op other values.
#include <vector>

#include "core/workload.hpp"

namespace memplan::sim {

struct FeatureMap {
  TensorId tensor = kNoTensor;
  std::vector<OpId> forward_uses;   // ops of the forward phase that read it, in issue order
  std::vector<OpId> backward_uses;  // ops of the backward phase that read it, in issue order
};

/// Feature maps in tensor id order (Note [Feature maps of micro-batches]). Requires a validated
/// workload.
std::vector<FeatureMap> find_feature_maps(const Workload& workload);

}  // namespace memplan::sim
