#include "search/policies/policy.hpp"

#include "core/fsdp_setting.hpp"

namespace memplan::search {

sim::Plan keep_all(const NetworkView& view, std::string_view policy) {
  sim::Plan plan;
  plan.policy = std::string(policy);
  plan.fingerprint = sim::workload_fingerprint(view.workload());
  for (const sim::FeatureMap& map : view.feature_maps()) {
    sim::Decision d;
    d.tensor = map.tensor;
    plan.decisions.push_back(d);
  }
  sim::apply_workload_fsdp_setting(plan, view.workload());
  return plan;
}

PolicyDecision decide_in_core(Evaluator& /*evaluator*/, const NetworkView& view) {
  return {keep_all(view, "in-core"), false, "every feature map kept"};
}

const std::vector<Policy>& policies() {
  static const std::vector<Policy> kPolicies{
      {"in-core", "keep every feature map on the device", decide_in_core, PolicyCost::kNone},
      {"vdnn-all", "vDNN: swap the input of every layer, prefetch one layer ahead", decide_vdnn_all,
       PolicyCost::kNone},
      {"vdnn-conv", "vDNN: swap the inputs of conv layers, prefetch up to the next conv",
       decide_vdnn_conv, PolicyCost::kNone},
      {"vdnn-dyn", "vDNN dynamic: the first rung of vDNN's ladder (swap set, algorithms) that fits",
       decide_vdnn_dyn, PolicyCost::kPerEviction},
      {"layrub", "Layrub: migrate every feature map to host, bring it back layer by layer",
       decide_layrub, PolicyCost::kNone},
      {"checkpoint-sqrt", "Chen et al.: keep every sqrt(n)-th map, recompute the rest",
       decide_checkpoint_sqrt, PolicyCost::kNone},
      {"superneurons", "SuperNeurons: recompute cheap layers, LRU-swap checkpoints on demand",
       decide_superneurons, PolicyCost::kPerEviction},
      {"pooch", "PoocH: profile all-swap, enumerate keep/swap, then swap->recompute by r(X)",
       decide_pooch, PolicyCost::kPerMap},
      {"capuchin",
       "Capuchin: swap where free time hides it, else recompute by memory saved per second",
       decide_capuchin, PolicyCost::kPerEviction},
      {"dtr", "DTR: evict by recompute cost / (bytes x staleness) when memory runs out", decide_dtr,
       PolicyCost::kPerEviction},
      {"zero-offload", "ZeRO-Offload: gradients and optimizer state on the host, CPU update",
       decide_zero_offload, PolicyCost::kNone},
      {"fsdp-offload",
       "FSDP CPU offload: parameters on the host per use, gradients and optimizer state too, "
       "CPU update",
       decide_fsdp_offload, PolicyCost::kNone},
      {"full-ac", "torch.utils.checkpoint around every block (torchtitan full AC, DeepSpeed)",
       decide_full_ac, PolicyCost::kNone},
      {"selective-ac",
       "PyTorch SAC, torchtitan's op policy: save matmuls (but every second) and attention",
       decide_selective_ac, PolicyCost::kNone},
      {"selective-ac-layer", "torchtitan selective AC by layer: every second block checkpointed",
       decide_selective_ac_layer, PolicyCost::kNone},
      {"megatron-selective", "Megatron-LM selective recompute: core attention recomputed",
       decide_megatron_selective, PolicyCost::kNone},
      {"budget-partitioner",
       "torch.compile's memory-budget partitioner: the largest activation_memory_budget that fits",
       decide_budget_partitioner, PolicyCost::kFew},
      {"offload-activations",
       "torchtune OffloadActivations: every saved tensor of 1 KiB or more to the host, on demand",
       decide_offload_activations, PolicyCost::kNone},
      {"fsdp-full-shard",
       "FSDP FULL_SHARD: each unit's parameters gathered again for backward, one unit ahead",
       decide_fsdp_full_shard, PolicyCost::kNone, true},
      {"fsdp-shard-grad-op",
       "FSDP SHARD_GRAD_OP: each unit's gathered parameters kept from forward to backward",
       decide_fsdp_shard_grad_op, PolicyCost::kNone, true},
  };
  return kPolicies;
}

std::vector<Policy> policies_for(const NetworkView& view) {
  const bool gathered = !sim::gathered_parameter_maps(view.feature_maps(), view.workload()).empty();
  std::vector<Policy> out;
  for (const Policy& p : policies()) {
    if (gathered || !p.fsdp_setting) out.push_back(p);
  }
  return out;
}

PolicyDecision decide(const Policy& policy, Evaluator& evaluator, const NetworkView& view) {
  PolicyDecision decision = policy.decide(evaluator, view);
  if (!policy.fsdp_setting) sim::apply_workload_fsdp_setting(decision.plan, view.workload());
  return decision;
}

const Policy* find_policy(std::string_view name) {
  for (const Policy& p : policies()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace memplan::search
