#pragma once
// FSDP's setting in a plan: which feature maps hold a unit's gathered parameters, and the plan
// decisions FULL_SHARD or SHARD_GRAD_OP with a backward prefetch make of them.
//
// Note [FSDP's setting in a plan]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Under FSDP (ZeRO-3 alike) a rank holds a shard of each unit's parameters; an all-gather on the
// communication stream makes the unit's full parameters before its forward, which its forward and
// backward ops read. That gathered tensor is a feature map like any other: made in forward, read
// in backward. Keeping it is SHARD_GRAD_OP; recomputing it — the all-gather re-run on its stream
// (Note [Re-running a side-stream op] in sim/lowering.cpp) — is FULL_SHARD's reshard after forward
// and gather again for backward; the recomputation's issue point (Note [Issue point of a
// recomputation] in core/plan.hpp) is the backward prefetch: with BACKWARD_PRE, a unit's
// backward gather is issued when the backward of the unit before it in backward order starts (p
// units ahead: p units before it). FSDP never reshards the root unit after forward: its
// parameters (those of no block: the embeddings, the final norm, the head) are the first that
// backward needs, so the root is the unit that backward reads first (a network whose head is in
// no unit of its own keeps its last block gathered instead, as torchtitan does for the same
// reason).
//
// Gathered parameters: feature maps that a forward all-gather makes from tensors that exist before
// the step (the rank's shards). A workload that records its job's setting (Distributed::fsdp)
// gets it in every plan a policy makes (search/policies/policy.hpp: run_policy), so a policy
// decides the activations and FSDP the parameters, as a user runs them; a search varies each
// unit's keep or regather and its issue point like any map's.
#include <cstddef>
#include <vector>

#include "core/collective.hpp"
#include "core/feature_maps.hpp"
#include "core/plan.hpp"

namespace memplan::sim {

/// Indices into `maps` (find_feature_maps of `workload`) of the gathered parameters.
std::vector<std::size_t> gathered_parameter_maps(const std::vector<FeatureMap>& maps,
                                                 const Workload& workload);

/// Sets `plan`'s decisions of the gathered parameters as FSDP runs them under `setting`.
void apply_fsdp_setting(Plan& plan, const Workload& workload, const FsdpSetting& setting);

/// apply_fsdp_setting with the workload's own setting (Distributed::fsdp); nothing without one.
void apply_workload_fsdp_setting(Plan& plan, const Workload& workload);

}  // namespace memplan::sim
