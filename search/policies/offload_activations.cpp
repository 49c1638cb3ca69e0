// Activation offloading as torchtune runs it (torchtune.training.OffloadActivations, a
// saved-tensors-hooks context around the model's forward).
//
// Note [torchtune's activation offloading]
// Its pack hook copies every saved tensor of at least `min_offload_size` bytes (1,024) that is not
// a parameter or buffer to pinned host memory on a side stream, and keeps the device tensor alive
// in a stash until `max_fwd_stash_size` (5) later tensors have been packed; then the compute
// stream waits for that copy and the device tensor goes. Its unpack hook brings a tensor back when
// the backward op that reads it asks for it, on the side stream, and the compute stream waits for
// the copy: there is no prefetch ahead. In a plan: every feature map of 1,024 bytes or more is
// swapped, its device copy released before the op that writes the fifth swapped map after it (or
// at its first backward use, for the last five), and prefetched before its first backward use
// (an on-demand fetch, which the reader waits for). What it cannot see: which maps are cheap to
// recompute, how long the link takes against the compute that could hide it, and the budget —
// it moves everything over the threshold, whether the step needed it or not.
#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

constexpr sim::Bytes kMinOffloadBytes = 1024;
constexpr std::size_t kForwardStash = 5;

}  // namespace

PolicyDecision decide_offload_activations(Evaluator& /*evaluator*/, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "offload-activations");
  std::vector<std::size_t> swapped;  // maps in the order their producers run
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    if (view.map_bytes(static_cast<int>(m)) >= kMinOffloadBytes) swapped.push_back(m);
  }
  std::stable_sort(swapped.begin(), swapped.end(), [&](std::size_t a, std::size_t b) {
    return view.producer(static_cast<int>(a)) < view.producer(static_cast<int>(b));
  });
  for (std::size_t k = 0; k < swapped.size(); ++k) {
    const sim::FeatureMap& map = view.feature_maps()[swapped[k]];
    sim::Decision& d = plan.decisions[swapped[k]];
    d.action = sim::Action::kSwap;
    d.prefetch_before = map.backward_uses.front();
    const sim::OpId after_forward = sim::last_forward_use(map, w) + 1;
    const sim::OpId stash_full = k + kForwardStash < swapped.size()
                                     ? view.producer(static_cast<int>(swapped[k + kForwardStash]))
                                     : d.prefetch_before;
    d.release_before = std::min(std::max(after_forward, stash_full), d.prefetch_before);
  }
  return {std::move(plan), false,
          fmt::format("{} maps of 1 KiB or more swapped, fetched when backward reads them",
                      swapped.size())};
}

}  // namespace memplan::search
