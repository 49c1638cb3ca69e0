// FSDP's CPU offload (PyTorch FullyShardedDataParallel with CPUOffload(offload_params=True), on
// one device): parameters live on the host and are brought in for each use — for forward, then
// again for backward — and freed after it; gradients go to the host as they are written; the
// optimizer step runs on the CPU over host copies. In a plan (Note [Host placement] in
// core/plan.hpp): ZeRO-Offload's placement (search/policies/zero_offload.cpp) plus every parameter
// on the host. Feature maps are kept. A step without an update op has nothing to offload: in-core.
#include "search/policies/policy.hpp"

namespace memplan::search {

PolicyDecision decide_fsdp_offload(Evaluator& /*evaluator*/, const NetworkView& view) {
  return offload_decision(view, "fsdp-offload", /*parameters=*/true);
}

}  // namespace memplan::search
