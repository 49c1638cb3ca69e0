// vDNN (Rhu et al., MICRO 2016): offload layer inputs to the host during forward and prefetch
// them during backward, one layer at a time.
//
// Note [vDNN prefetch rule]
// When the backward pass of layer `cur` starts, vDNN walks down from layer cur-1: the first layer
// whose input was offloaded and not yet prefetched has it prefetched now (one prefetch per
// backward step); the walk gives up, prefetching nothing, if it meets a conv layer first. In a
// plan this becomes `prefetch_before` = the first backward op of `cur` for the maps of the layer
// found. A map no step prefetched is fetched on demand before its first backward use, and the
// backward op waits for it (vDNN's "backward waits for its own prefetch").
//
// What is a layer's input: the feature maps a forward op reads (maps that no forward op reads,
// such as pool indices or saved statistics, are not layer inputs and stay on the device).
//
// Note [vdnn-dyn]
// vDNN's dynamic policy tries a fixed ladder and takes the first rung whose plan fits: in-core
// with the fastest algorithms; conv inputs swapped, fastest algorithms; all inputs swapped,
// fastest algorithms; then conv, then all, choosing per layer the fastest algorithm whose
// workspace fits at that point (memplan: simulate; where memory runs out at an op that has
// cheaper algorithms, give it the fastest one that saves the missing bytes, or failing that the
// one with the least workspace, and simulate again); then conv, then all, with every op on its
// memory-optimal algorithm. When even that does not fit, vDNN reports that it cannot train.
#include <algorithm>

#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

PolicyDecision vdnn(const NetworkView& view, bool conv_only, std::string_view name) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, name);
  std::vector<bool> swapped(view.feature_maps().size(), false);
  std::size_t count = 0;
  for (sim::OpId layer : view.layers()) {
    if (conv_only && !is_conv_layer(w.op(layer).layer)) continue;
    for (int m : view.maps_read_by(layer)) {
      if (!swapped[static_cast<std::size_t>(m)]) ++count;
      swapped[static_cast<std::size_t>(m)] = true;
    }
  }
  for (std::size_t m = 0; m < swapped.size(); ++m) {
    if (swapped[m]) plan.decisions[m].action = sim::Action::kSwap;
  }
  // The prefetch rule, replayed over the backward ops in issue order.
  std::vector<bool> prefetched(swapped.size(), false);
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kBackward || op.differentiates == sim::kNoOp) continue;
    if (view.backward_ops_of(op.differentiates).front() != op.id) continue;  // once per layer
    for (int l = view.layer_index(op.differentiates) - 1; l >= 0; --l) {
      const sim::OpId layer = view.layers()[static_cast<std::size_t>(l)];
      bool found = false;
      for (int m : view.maps_read_by(layer)) {
        const auto mi = static_cast<std::size_t>(m);
        if (!swapped[mi] || prefetched[mi]) continue;
        // The prefetch must not start before the map's last forward use.
        const auto& map = view.feature_maps()[mi];
        if (map.backward_uses.front() < op.id) continue;  // already needed: fetched on demand
        plan.decisions[mi].prefetch_before = op.id;
        prefetched[mi] = true;
        found = true;
      }
      if (found || is_conv_layer(w.op(layer).layer)) break;
    }
  }
  return {std::move(plan), false, fmt::format("{} layer inputs swapped", count)};
}

// The algorithm of `op` with the least workspace (ties: the fastest); -1 for the default.
std::int32_t least_workspace(const sim::Op& op) {
  std::int32_t best = -1;
  sim::Bytes ws = op.workspace_bytes;
  sim::Nanoseconds ns = op.duration_ns;
  for (std::size_t a = 0; a < op.algorithms.size(); ++a) {
    const sim::Algorithm& alg = op.algorithms[a];
    if (alg.workspace_bytes < ws || (alg.workspace_bytes == ws && alg.duration_ns < ns)) {
      best = static_cast<std::int32_t>(a);
      ws = alg.workspace_bytes;
      ns = alg.duration_ns;
    }
  }
  return best;
}

void choose(sim::Plan& plan, sim::OpId op, std::int32_t algorithm) {
  auto it = std::find_if(plan.algorithms.begin(), plan.algorithms.end(),
                         [&](const sim::AlgorithmChoice& c) { return c.op == op; });
  if (algorithm < 0) {
    if (it != plan.algorithms.end()) plan.algorithms.erase(it);
    return;
  }
  if (it != plan.algorithms.end()) {
    it->algorithm = algorithm;
    return;
  }
  plan.algorithms.push_back({op, algorithm});
  std::sort(
      plan.algorithms.begin(), plan.algorithms.end(),
      [](const sim::AlgorithmChoice& a, const sim::AlgorithmChoice& b) { return a.op < b.op; });
}

// Greedy per-layer algorithm choice (rung 4). Returns whether the plan fits in the end.
bool fit_algorithms(Evaluator& evaluator, sim::Plan& plan) {
  const sim::Workload& w = evaluator.workload();
  for (;;) {
    const Evaluation e = evaluator.cost(plan);
    if (e.feasible) return true;
    if (e.oom_op == sim::kNoOp) return false;
    const sim::Op& op = w.op(e.oom_op);
    auto current = std::find_if(plan.algorithms.begin(), plan.algorithms.end(),
                                [&](const sim::AlgorithmChoice& c) { return c.op == op.id; });
    const sim::Bytes current_ws =
        current == plan.algorithms.end()
            ? op.workspace_bytes
            : op.algorithms[static_cast<std::size_t>(current->algorithm)].workspace_bytes;
    // The fastest algorithm that saves the missing bytes; failing that, the least workspace.
    std::int32_t pick = -1;
    for (std::size_t a = 0; a < op.algorithms.size(); ++a) {
      const sim::Algorithm& alg = op.algorithms[a];
      if (alg.workspace_bytes <= current_ws - e.oom_bytes_missing &&
          (pick < 0 ||
           alg.duration_ns < op.algorithms[static_cast<std::size_t>(pick)].duration_ns)) {
        pick = static_cast<std::int32_t>(a);
      }
    }
    if (pick < 0) pick = least_workspace(op);
    if (pick < 0 || (current != plan.algorithms.end() && current->algorithm == pick)) return false;
    const sim::Bytes new_ws = op.algorithms[static_cast<std::size_t>(pick)].workspace_bytes;
    if (new_ws >= current_ws) return false;  // nothing left to save at this op
    choose(plan, op.id, pick);
  }
}

}  // namespace

PolicyDecision decide_vdnn_all(Evaluator& /*evaluator*/, const NetworkView& view) {
  return vdnn(view, false, "vdnn-all");
}

PolicyDecision decide_vdnn_conv(Evaluator& /*evaluator*/, const NetworkView& view) {
  return vdnn(view, true, "vdnn-conv");
}

PolicyDecision decide_vdnn_dyn(Evaluator& evaluator, const NetworkView& view) {
  auto named = [](sim::Plan plan) {
    plan.policy = "vdnn-dyn";
    return plan;
  };
  const sim::Plan in_core = keep_all(view, "vdnn-dyn");
  if (evaluator.cost(in_core).feasible) return {in_core, false, "in-core, fastest algorithms"};
  const sim::Plan conv = named(vdnn(view, true, "vdnn-dyn").plan);
  if (evaluator.cost(conv).feasible)
    return {conv, false, "conv inputs swapped, fastest algorithms"};
  const sim::Plan all = named(vdnn(view, false, "vdnn-dyn").plan);
  if (evaluator.cost(all).feasible) return {all, false, "all inputs swapped, fastest algorithms"};
  for (const auto& [base, what] : {std::pair{conv, "conv"}, std::pair{all, "all"}}) {
    sim::Plan plan = base;
    if (fit_algorithms(evaluator, plan)) {
      return {plan, false,
              fmt::format("{} inputs swapped, {} layers off their fastest algorithm", what,
                          plan.algorithms.size())};
    }
  }
  for (const auto& [base, what] : {std::pair{conv, "conv"}, std::pair{all, "all"}}) {
    sim::Plan plan = base;
    for (const sim::Op& op : view.workload().ops) choose(plan, op.id, least_workspace(op));
    if (evaluator.cost(plan).feasible) {
      return {plan, false, fmt::format("{} inputs swapped, memory-optimal algorithms", what)};
    }
  }
  sim::Plan last = all;
  for (const sim::Op& op : view.workload().ops) choose(last, op.id, least_workspace(op));
  return {last, true,
          "cannot train: all inputs swapped with memory-optimal algorithms does not fit"};
}

}  // namespace memplan::search
