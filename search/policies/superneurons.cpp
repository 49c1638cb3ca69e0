// SuperNeurons (Wang et al., PPoPP 2018): liveness analysis, cost-aware recomputation and a tensor
// pool that swaps checkpoints least-recently-used first.
//
// Note [SuperNeurons in a plan]
// - Checkpoint layers are the expensive ones: convolutions, fully connected layers, joins (add),
//   concat, and the loss (softmax); a tensor read by several forward layers (a fork) is a
//   checkpoint too. Their outputs are kept, or swapped by the tensor pool.
// - Every other layer (ReLU, batch-norm, pooling, dropout, LRN, ...) is cheap: its output is freed
//   after forward and recomputed in backward from the nearest checkpoint.
// - Segments: the forward ops in issue order; each checkpoint layer (or producer of a checkpoint
//   map) starts a segment, and the non-checkpoint maps whose producers follow it, up to the next
//   checkpoint layer, form it. In a chain that is the run of cheap layers between two
//   checkpoints, as in the paper; in a DAG it is the run in issue order.
// - Per segment, as the paper decides it: if keeping every regenerated map of the segment (the sum
//   of their bytes) fits under the largest single layer's backward memory (the most that one
//   backward op reads, writes and uses as workspace, which every plan must find room for), the
//   segment is speed-centric: recomputed once and its results kept until backward is done with
//   them (a plain recompute decision). Otherwise it is memory-centric: its maps are recompute
//   with `per_use`, so the lowering regenerates them from the checkpoint for every backward node
//   (layer) that reads them and forgets them right after (quadratic extra compute, no extra
//   memory).
// - The tensor pool: the plan is simulated; when an allocation fails at op X, the kept checkpoint
//   that is resident at X and was used least recently before X is swapped instead, and the plan is
//   simulated again, until it fits or nothing is left to swap. Victims are taken in batches:
//   at the op where memory ran out, least recently used first, until their bytes add up to the
//   bytes missing there; then the plan is simulated again (the same APPROXIMATION as DTR's
//   batches, Note [DTR frozen into a plan]: one simulation per victim would be quadratic). Its
//   swap-in starts one conv layer ahead: before the backward op of the nearest conv layer above its
//   first backward use.
#include <algorithm>
#include <vector>

#include <fmt/core.h>

#include "search/policies/policy.hpp"
#include "search/policies/schedule.hpp"

namespace memplan::search {
namespace {

bool is_checkpoint_layer(const sim::LayerType& layer) {
  using enum sim::Layer;
  return is_conv_layer(layer) || layer == kLinear || layer == kAdd || layer == kConcat ||
         layer == kSoftmax || layer == kSoftmaxCrossEntropy || layer == kEmbedding;
}

// The backward op of the nearest conv layer that runs before `use` in backward, or kNoOp.
sim::OpId conv_prefetch_point(const NetworkView& view, sim::OpId use) {
  const sim::Workload& w = view.workload();
  for (sim::OpId op = use - 1; op >= sim::OpId{0} && w.op(op).phase == sim::Phase::kBackward;
       --op) {
    const sim::OpId fwd = w.op(op).differentiates;
    if (fwd != sim::kNoOp && is_conv_layer(w.op(fwd).layer)) return op;
  }
  return sim::kNoOp;
}

// The largest single layer's backward memory: inputs, outputs and workspace of one backward op.
sim::Bytes largest_backward_layer_bytes(const sim::Workload& w) {
  sim::Bytes largest = 0;
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kBackward) continue;
    sim::Bytes bytes = op.workspace_bytes;
    for (sim::TensorId t : op.inputs) bytes += w.tensor(t).bytes;
    for (sim::TensorId t : op.outputs) bytes += w.tensor(t).bytes;
    largest = std::max(largest, bytes);
  }
  return largest;
}

}  // namespace

namespace {

// Which maps are checkpoints: outputs of checkpoint layers and forks (Note [SuperNeurons in a
// plan]).
std::vector<bool> checkpoint_maps(const NetworkView& view) {
  const sim::Workload& w = view.workload();
  std::vector<bool> checkpoint(view.feature_maps().size(), false);
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    const bool fork = view.feature_maps()[m].forward_uses.size() > 1;
    checkpoint[m] = fork || is_checkpoint_layer(w.op(view.producer(static_cast<int>(m))).layer);
  }
  return checkpoint;
}

struct SegmentCounts {
  std::size_t speed = 0;
  std::size_t memory = 0;
};

// Marks every non-checkpoint map recompute, per use when its segment's maps do not fit under the
// largest single layer's backward memory (memory-centric), once otherwise (speed-centric).
SegmentCounts recompute_segments(const NetworkView& view, const std::vector<bool>& checkpoint,
                                 sim::Plan& plan) {
  const sim::Workload& w = view.workload();
  // Segments: each checkpoint layer (forward op) starts a new one; a non-checkpoint map belongs
  // to the segment its producer is in.
  std::vector<int> segment_of_op(w.ops.size(), 0);
  std::vector<bool> checkpoint_op(w.ops.size(), false);
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    if (checkpoint[m]) checkpoint_op[index(view.producer(static_cast<int>(m)))] = true;
  }
  int segments = 0;
  for (sim::OpId op : view.layers()) {
    const auto i = index(op);
    if (checkpoint_op[i] || is_checkpoint_layer(w.op(op).layer)) ++segments;
    segment_of_op[i] = segments;
  }
  auto segment = [&](std::size_t m) {
    return static_cast<std::size_t>(segment_of_op[index(view.producer(static_cast<int>(m)))]);
  };
  std::vector<sim::Bytes> segment_bytes(static_cast<std::size_t>(segments) + 1, 0);
  std::vector<bool> segment_used(segment_bytes.size(), false);
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    if (checkpoint[m]) continue;
    segment_bytes[segment(m)] += view.map_bytes(static_cast<int>(m));
    segment_used[segment(m)] = true;
  }
  const sim::Bytes layer_limit = largest_backward_layer_bytes(w);
  SegmentCounts counts;
  for (std::size_t s = 0; s < segment_bytes.size(); ++s) {
    if (segment_used[s]) ++(segment_bytes[s] > layer_limit ? counts.memory : counts.speed);
  }
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    if (checkpoint[m]) continue;
    plan.decisions[m].action = sim::Action::kRecompute;
    plan.decisions[m].per_use = segment_bytes[segment(m)] > layer_limit;
  }
  return counts;
}

// The kept checkpoint resident at `oom_op` that was used least recently before it, or -1.
int least_recently_used(const NetworkView& view, const std::vector<bool>& checkpoint,
                        const sim::Plan& plan, sim::OpId oom_op) {
  int victim = -1;
  sim::OpId victim_touch = sim::kNoOp;
  for (std::size_t m = 0; m < checkpoint.size(); ++m) {
    if (!checkpoint[m] || plan.decisions[m].action != sim::Action::kKeep) continue;
    const auto& fm = view.feature_maps()[m];
    if (view.producer(static_cast<int>(m)) >= oom_op || fm.backward_uses.front() <= oom_op)
      continue;
    const sim::OpId touched = last_touch_before(view, static_cast<int>(m), oom_op);
    if (victim < 0 || touched < victim_touch) {
      victim = static_cast<int>(m);
      victim_touch = touched;
    }
  }
  return victim;
}

// The tensor pool: swaps kept checkpoints least recently used first, a batch per simulation,
// until the plan fits or nothing is left to swap. Returns how many it swapped.
std::size_t swap_by_pool(Evaluator& evaluator, const NetworkView& view,
                         const std::vector<bool>& checkpoint, sim::Plan& plan) {
  // Only where memory runs out is read, of plans that swap maps the plan before the pool keeps:
  // the oracle answers them from that plan's allocations (Note [One oracle] in
  // search/oracle/evaluator.cpp).
  const BaseScope based(evaluator, plan);
  std::vector<int> evicted;
  for (;;) {
    const Evaluation e = evaluator.fits(plan);
    if (e.feasible || e.oom_op == sim::kNoOp) break;
    const std::size_t before = evicted.size();
    sim::Bytes freed = 0;
    while (freed < std::max<sim::Bytes>(1, e.oom_bytes_missing)) {
      const int victim = least_recently_used(view, checkpoint, plan, e.oom_op);
      if (victim < 0) break;  // nothing left to swap: the caller reports the plan does not fit
      sim::Decision& d = plan.decisions[static_cast<std::size_t>(victim)];
      d.action = sim::Action::kSwap;
      const sim::OpId at = conv_prefetch_point(
          view, view.feature_maps()[static_cast<std::size_t>(victim)].backward_uses.front());
      if (at != sim::kNoOp) d.prefetch_before = at;
      freed += view.map_bytes(victim);
      evicted.push_back(victim);
    }
    if (evicted.size() == before) break;
  }
  return evicted.size();
}

}  // namespace

PolicyDecision decide_superneurons(Evaluator& evaluator, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "superneurons");
  const std::vector<bool> checkpoint = checkpoint_maps(view);
  const SegmentCounts segments = recompute_segments(view, checkpoint, plan);
  const std::size_t swapped = swap_by_pool(evaluator, view, checkpoint, plan);
  const auto counts = plan.action_counts();
  std::string note = fmt::format(
      "{} recomputed ({} segments speed-centric, {} memory-centric), {} checkpoints swapped by "
      "the pool",
      counts[static_cast<std::size_t>(sim::Action::kRecompute)], segments.speed, segments.memory,
      swapped);
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
