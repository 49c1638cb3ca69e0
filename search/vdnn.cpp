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
// Not modelled yet: the per-conv algorithm choice and vdnn-dyn's ladder (they need per-op
// algorithm selection in the Plan).
#include <algorithm>

#include <fmt/core.h>

#include "search/policy.hpp"

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
    if (op.phase != sim::Phase::kBackward || op.differentiates == sim::kNoId) continue;
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

}  // namespace

PolicyDecision decide_vdnn_all(Evaluator& /*evaluator*/, const NetworkView& view) {
  return vdnn(view, false, "vdnn-all");
}

PolicyDecision decide_vdnn_conv(Evaluator& /*evaluator*/, const NetworkView& view) {
  return vdnn(view, true, "vdnn-conv");
}

}  // namespace memplan::search
