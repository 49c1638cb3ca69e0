#pragma once
// Policy: a published rule that turns a Workload and a Machine into a Plan (../shared/POLICIES.md).
// Every policy is a function of the same shape, registered by name, so that `memplan compare`
// and the search can run them side by side on the same simulator. A policy may simulate plans
// (through the Evaluator) while it decides; whether its final plan fits is for the caller to
// simulate, except where the policy itself knows it cannot train (vdnn-dyn), which it says in
// `gave_up`.
#include <string>
#include <string_view>
#include <vector>

#include "search/evaluator.hpp"
#include "search/network_view.hpp"
#include "sim/plan.hpp"

namespace memplan::search {

struct PolicyDecision {
  sim::Plan plan;
  bool gave_up = false;  // the policy's own verdict that the step cannot be trained
  std::string note;      // what the policy chose, in a few words (e.g. vdnn-dyn's rung)
};

using DecideFunction = PolicyDecision (*)(Evaluator& evaluator, const NetworkView& view);

struct Policy {
  std::string_view name;
  std::string_view summary;
  DecideFunction decide;
};

/// All policies, in the order `memplan compare` lists them.
const std::vector<Policy>& policies();
/// The policy of that name, or nullptr.
const Policy* find_policy(std::string_view name);

/// An in-core plan (every map kept) named after `policy`, to be edited by a policy.
sim::Plan keep_all(const NetworkView& view, std::string_view policy);

// The policy families, one file each.
PolicyDecision decide_in_core(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_vdnn_all(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_vdnn_conv(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_vdnn_dyn(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_layrub(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_checkpoint_sqrt(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_superneurons(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_pooch(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_capuchin(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_dtr(Evaluator& evaluator, const NetworkView& view);

/// PoocH's profile of all-swap (Note [PoocH in memplan]): feature maps (indices into
/// view.feature_maps()) whose swap-in is not hidden (L_I, longest stall first) and those whose
/// swap-out is not hidden but whose swap-in is (L_O \ L_I, output layer first).
struct PoochProfile {
  std::vector<int> swap_in_exposed;
  std::vector<int> swap_out_only_exposed;
};
PoochProfile pooch_profile(Evaluator& evaluator, const NetworkView& view);

}  // namespace memplan::search
