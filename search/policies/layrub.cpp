// Layrub (Jin et al., TACO 2018): layer-centric memory reuse. Inter-layer: after a layer's forward
// use its feature maps migrate to host memory and come back layer by layer in backward, so only
// the current layer's working set stays on the device. Intra-layer: element-wise layers write
// over their input and gradients reuse dead forward buffers.
//
// In a plan: every feature map is swapped, and its prefetch is issued before the backward op that
// precedes its first backward use (one layer ahead — the lowering's default). Intra-layer reuse is
// already in the workload (in-place outputs) and in the allocator (a freed forward buffer is the
// best fit for the gradient of the same size), so it needs no decision here.
#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {

PolicyDecision decide_layrub(Evaluator& /*evaluator*/, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "layrub");
  for (sim::Decision& d : plan.decisions) d.action = sim::Action::kSwap;
  std::string note = fmt::format("{} maps migrated", plan.decisions.size());
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
