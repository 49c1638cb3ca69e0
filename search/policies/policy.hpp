#pragma once
// Policy: a published rule that turns a Workload and a Machine into a Plan (../shared/POLICIES.md).
// Every policy is a function of the same shape, registered by name, so that `memplan compare`
// and the search can run them side by side on the same simulator. A policy may simulate plans
// (through the Evaluator) while it decides; whether its final plan fits is for the caller to
// simulate, except where the policy itself knows it cannot train (vdnn-dyn), which it says in
// `gave_up`.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/schedule.hpp"

namespace memplan::search {

struct PolicyDecision {
  sim::Plan plan;
  bool gave_up = false;  // the policy's own verdict that the step cannot be trained
  std::string note;      // what the policy chose, in a few words (e.g. vdnn-dyn's rung)
};

using DecideFunction = PolicyDecision (*)(Evaluator& evaluator, const NetworkView& view);

/// How much simulating a policy does as it decides, roughly: the search seeds with the cheapest
/// first, so that a short time limit still gets the cheap policies' plans.
enum class PolicyCost {
  kNone,         // decides without simulating
  kFew,          // a fixed handful of simulations
  kPerEviction,  // one simulation per batch of maps it evicts when memory runs out
  kPerMap,       // simulations per feature map (a profile, a ranking)
};

struct Policy {
  std::string_view name;
  std::string_view summary;
  DecideFunction decide;
  PolicyCost cost = PolicyCost::kFew;
  /// One of FSDP's standard settings: it decides the gathered parameters itself, and only a
  /// workload that has some (core/fsdp_setting.hpp) is given it.
  bool fsdp_setting = false;
};

/// All policies, in the order `memplan compare` lists them.
const std::vector<Policy>& policies();
/// The policies for this workload, in policies()' order: FSDP's settings only where parameters are
/// gathered.
std::vector<Policy> policies_for(const NetworkView& view);
/// The policy's decision as the caller runs it: the gathered parameters of a workload that records
/// FSDP's setting decided by that setting (Note [FSDP's setting in a plan] in
/// core/fsdp_setting.hpp), unless the policy is one of FSDP's settings itself.
PolicyDecision decide(const Policy& policy, Evaluator& evaluator, const NetworkView& view);
/// The policy of that name, or nullptr.
const Policy* find_policy(std::string_view name);

/// An in-core plan (every map kept; a workload's gathered parameters as its FSDP setting has them)
/// named after `policy`, to be edited by a policy.
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
PolicyDecision decide_zero_offload(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_fsdp_offload(Evaluator& evaluator, const NetworkView& view);
// Today's policies (activation_checkpointing.cpp, budget_partitioner.cpp, offload_activations.cpp).
PolicyDecision decide_full_ac(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_selective_ac(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_selective_ac_layer(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_megatron_selective(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_budget_partitioner(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_offload_activations(Evaluator& evaluator, const NetworkView& view);
// FSDP's standard settings (fsdp_settings.cpp).
PolicyDecision decide_fsdp_full_shard(Evaluator& evaluator, const NetworkView& view);
PolicyDecision decide_fsdp_shard_grad_op(Evaluator& evaluator, const NetworkView& view);

/// PyTorch's memory-budget partitioner's choice at `budget` (0 to 1: torch._functorch.config.
/// activation_memory_budget), Note [The memory-budget partitioner in a plan].
sim::Plan partitioner_plan(const NetworkView& view, double budget);

/// The offload policies' plan (search/policies/zero_offload.cpp): every feature map kept, gradients
/// and optimizer state (and, with `parameters`, the parameters) on the host, the update on the
/// host.
PolicyDecision offload_decision(const NetworkView& view, std::string_view name, bool parameters);

/// PoocH's profile of all-swap (Note [PoocH in memplan]): feature maps (indices into
/// view.feature_maps()) whose swap-in is not hidden (L_I, longest stall first) and those whose
/// swap-out is not hidden but whose swap-in is (L_O \ L_I, output layer first).
struct PoochProfile {
  std::vector<int> swap_in_exposed;
  std::vector<int> swap_out_only_exposed;
};
PoochProfile pooch_profile(Evaluator& evaluator, const NetworkView& view);

/// How much of PoocH's keep/swap tree is enumerated (Note [PoocH in memplan]): at most
/// `max_enumerated` maps of L_I (the longest stalls), fewer when 2^k * (1 + |L_O \ L_I|) would
/// exceed `leaf_simulations`; the rest of L_I is scanned on the best leaf.
struct PoochLimits {
  std::size_t max_enumerated = 8;
  std::size_t leaf_simulations = 4096;
  /// Single-map keep trials checked at once (Note [PoocH in memplan], the keep scan's
  /// speculation); 1 checks one after another. Changes no decision, only the work done.
  std::size_t speculative_trials = 4;
};

struct PoochKeepSwap {
  sim::Plan plan;              // every map swapped except those the step keeps
  std::size_t enumerated = 0;  // maps of L_I in the tree
  /// Long keep scans of the chosen leaf that ended on refusals in a row, the maps after them
  /// left swapped (Note [PoocH in memplan], the keep scan).
  std::size_t scans_ended = 0;
};
/// PoocH's keep/swap step (step 2 of Note [PoocH in memplan]) from the all-swap profile.
PoochKeepSwap pooch_keep_swap(Evaluator& evaluator, const NetworkView& view,
                              const PoochProfile& profile, const PoochLimits& limits = {});

/// PoocH's swap-in scheduling (Note [PoocH's swap-in scheduling]): sets every swapped map's
/// prefetch_before to the earliest op from which memory has room for it, in the order the maps
/// are needed; leaves the default points when the plan does not fit with them, or when the
/// earlier points fit under no lowered capacity, or make the step slower.
void pooch_schedule_swap_ins(Evaluator& evaluator, const NetworkView& view, sim::Plan& plan);

/// Capuchin's candidates in the order it takes them (Note [Capuchin in a plan]): swaps whose
/// free time hides a round trip, largest free time first; then recomputes, highest memory saving
/// per second first. Maps with no op between their last forward and first backward use save
/// nothing and are not candidates.
struct CapuchinCandidate {
  int map;                   // index into view.feature_maps()
  bool hides;                // swap (the round trip fits in the free time) or recompute
  sim::Nanoseconds free_ns;  // free time in the in-core schedule
  double msps;               // bytes / nanosecond of recompute (the producer's duration)
};
std::vector<CapuchinCandidate> capuchin_candidates(const NetworkView& view,
                                                   const sim::Machine& machine);

/// DTR's cost of evicting a map (Note [DTR frozen into a plan]): its producer's time plus that of
/// its evicted neighbourhood, the evicted maps connected to it through evicted maps (those
/// regenerating it needs and those that would need it). The evicted maps' connected components
/// are kept in a union-find with each component's summed producer times, so a cost is a look at
/// the map's neighbours and evicting a map is a union, where walking the neighbourhood made each
/// cost as long as the chain of evicted maps around it.
class DtrCosts {
 public:
  /// The maps `plan` recomputes are the evicted ones. The view must outlive this.
  DtrCosts(const NetworkView& view, const sim::Plan& plan);
  /// The cost of evicting `map` (which is not evicted) as the plan stands.
  sim::Nanoseconds cost(int map);
  /// `map` is evicted from now on.
  void evict(int map);

 private:
  template <typename F>
  void for_each_neighbour(int map, F&& f) const;
  int root(int map);
  [[nodiscard]] sim::Nanoseconds producer_ns(int map) const;
  [[nodiscard]] sim::Nanoseconds component_ns(int root) const {
    return component_ns_[static_cast<std::size_t>(root)];
  }

  const NetworkView* view_;
  std::vector<int> parent_;
  std::vector<sim::Nanoseconds> component_ns_;  // at a root: its component's producer times
  std::vector<char> evicted_;
  std::vector<int> roots_;  // cost()'s scratch
};

/// DTR's h = cost / (bytes x time since the map's last use before `at`), in the schedule.
double dtr_score(const NetworkView& view, DtrCosts& costs, const InCoreSchedule& schedule, int map,
                 sim::OpId at);

}  // namespace memplan::search
