// SuperNeurons (Wang et al., PPoPP 2018): liveness analysis, cost-aware recomputation and a tensor
// pool that swaps checkpoints least-recently-used first.
//
// Note [SuperNeurons in a plan]
// - Checkpoint layers are the expensive ones: convolutions, fully connected layers, joins (add),
//   concat, and the loss (softmax); a tensor read by several forward layers (a fork) is a
//   checkpoint too. Their outputs are kept, or swapped by the tensor pool.
// - Every other layer (ReLU, batch-norm, pooling, dropout, LRN, ...) is cheap: its output is freed
//   after forward and recomputed in backward from the nearest checkpoint.
// - Speed-centric recomputation (recompute a segment once and keep the results until backward is
//   done with them) is what the lowering does for recomputed maps. The memory-centric variant
//   (recompute per use) is not expressible in a plan yet; this policy always runs speed-centric.
// - The tensor pool: the plan is simulated; when an allocation fails at op X, the kept checkpoint
//   that is resident at X and was used least recently before X is swapped instead, and the plan is
//   simulated again, until it fits or nothing is left to swap. Its swap-in starts one conv layer
//   ahead: before the backward op of the nearest conv layer above its first backward use.
#include <fmt/core.h>

#include "search/policy.hpp"
#include "search/schedule.hpp"

namespace memplan::search {
namespace {

bool is_checkpoint_layer(std::string_view layer) {
  return is_conv_layer(layer) || layer == "linear" || layer == "add" || layer == "concat" ||
         layer.find("softmax") != std::string_view::npos || layer == "embedding";
}

// The backward op of the nearest conv layer that runs before `use` in backward, or kNoId.
sim::OpId conv_prefetch_point(const NetworkView& view, sim::OpId use) {
  const sim::Workload& w = view.workload();
  for (sim::OpId op = use - 1; op >= 0 && w.op(op).phase == sim::Phase::kBackward; --op) {
    const sim::OpId fwd = w.op(op).differentiates;
    if (fwd != sim::kNoId && is_conv_layer(w.op(fwd).layer)) return op;
  }
  return sim::kNoId;
}

}  // namespace

PolicyDecision decide_superneurons(Evaluator& evaluator, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "superneurons");
  std::vector<bool> checkpoint(view.feature_maps().size(), false);
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    const auto& fm = view.feature_maps()[m];
    const bool fork = fm.forward_uses.size() > 1;
    checkpoint[m] = fork || is_checkpoint_layer(w.op(view.producer(static_cast<int>(m))).layer);
    if (!checkpoint[m]) plan.decisions[m].action = sim::Action::kRecompute;
  }
  std::size_t swapped = 0;
  for (;;) {
    const Evaluation e = evaluator.evaluate(plan);
    if (e.feasible || e.oom_op == sim::kNoId) break;
    // Least recently used kept checkpoint resident when memory ran out.
    int victim = -1;
    sim::OpId victim_touch = sim::kNoId;
    for (std::size_t m = 0; m < checkpoint.size(); ++m) {
      if (!checkpoint[m] || plan.decisions[m].action != sim::Action::kKeep) continue;
      const auto& fm = view.feature_maps()[m];
      if (view.producer(static_cast<int>(m)) >= e.oom_op || fm.backward_uses.front() <= e.oom_op)
        continue;
      const sim::OpId touched = last_touch_before(view, static_cast<int>(m), e.oom_op);
      if (victim < 0 || touched < victim_touch) {
        victim = static_cast<int>(m);
        victim_touch = touched;
      }
    }
    if (victim < 0) break;  // nothing left to swap: the caller reports the plan does not fit
    sim::Decision& d = plan.decisions[static_cast<std::size_t>(victim)];
    d.action = sim::Action::kSwap;
    const sim::OpId at = conv_prefetch_point(
        view, view.feature_maps()[static_cast<std::size_t>(victim)].backward_uses.front());
    if (at != sim::kNoId) d.prefetch_before = at;
    ++swapped;
  }
  const auto counts = plan.action_counts();
  std::string note =
      fmt::format("{} recomputed, {} checkpoints swapped by the pool",
                  counts[static_cast<std::size_t>(sim::Action::kRecompute)], swapped);
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
