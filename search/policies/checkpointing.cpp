// Checkpointing (Chen et al., 2016, "Training deep nets with sublinear memory cost"): split the
// n feature maps (in forward order) into segments of about sqrt(n), keep the last map of each
// segment and recompute the others in backward from the nearest kept one. The lowering keeps a
// regenerated map until its last backward use, so a segment is recomputed once — Chen's scheme.
#include <cmath>

#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {

PolicyDecision decide_checkpoint_sqrt(Evaluator& /*evaluator*/, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "checkpoint-sqrt");
  const std::size_t n = plan.decisions.size();
  if (n == 0) return {std::move(plan), false, "no feature maps"};
  const auto k =
      static_cast<std::size_t>(std::max(1.0, std::round(std::sqrt(static_cast<double>(n)))));
  // Maps are in tensor id order, which follows the forward order of their producers.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if ((i + 1) % k == 0) {
      ++kept;
    } else {
      plan.decisions[i].action = sim::Action::kRecompute;
    }
  }
  return {std::move(plan), false, fmt::format("1 in {} of {} maps kept ({} kept)", k, n, kept)};
}

}  // namespace memplan::search
