// ZeRO-Offload (Ren et al., USENIX ATC 2021): gradients go to the host as backward writes them,
// the optimizer state lives on the host, and the optimizer step runs on the CPU; the updated
// parameters are copied back to the device, which keeps them (and every feature map) throughout.
// In a plan (Note [Host placement] in core/plan.hpp): every gradient the update reads and every
// optimizer state placed on the host, the update on the host, the parameters kept (each gets a
// host master copy that the CPU updates, as ZeRO-Offload's fp32 master weights). A step without
// an update op has nothing to offload: the plan is in-core.
#include "search/policies/policy.hpp"

namespace memplan::search {

PolicyDecision decide_zero_offload(Evaluator& /*evaluator*/, const NetworkView& view) {
  return offload_decision(view, "zero-offload", /*parameters=*/false);
}

PolicyDecision offload_decision(const NetworkView& view, std::string_view name, bool parameters) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, name);
  sim::set_host_placement(plan, w, sim::TensorKind::kGradient, true);
  sim::set_host_placement(plan, w, sim::TensorKind::kOptimizerState, true);
  if (parameters) sim::set_host_placement(plan, w, sim::TensorKind::kParameter, true);
  plan.host_update = true;
  if (!sim::host_update_problem(plan, w).empty()) {
    return {keep_all(view, name), false, "no update the host can run: nothing offloaded"};
  }
  return {std::move(plan), false,
          parameters ? "parameters, gradients and optimizer state on the host, CPU update"
                     : "gradients and optimizer state on the host, CPU update"};
}

}  // namespace memplan::search
