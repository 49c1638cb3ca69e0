// FSDP's standard settings as policies (Note [FSDP's setting in a plan] in core/fsdp_setting.hpp):
// every activation kept, each unit's gathered parameters as FULL_SHARD (reshard after forward,
// gathered again for backward with BACKWARD_PRE's prefetch of one unit — or the job's own prefetch
// depth when it records one) or SHARD_GRAD_OP (kept from forward to backward) runs them. Source:
// PyTorch's FullyShardedDataParallel (ShardingStrategy, BackwardPrefetch) and FSDP2's fully_shard
// (reshard_after_forward); docs/policy-papers.md.
#include <string>

#include <fmt/core.h>

#include "core/fsdp_setting.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {

namespace {

PolicyDecision fsdp_decision(const NetworkView& view, std::string_view name, bool reshard) {
  const sim::Workload& w = view.workload();
  sim::FsdpSetting setting;
  if (w.distributed && w.distributed->fsdp) setting = *w.distributed->fsdp;
  setting.reshard_after_forward = reshard;
  sim::Plan plan = keep_all(view, name);
  sim::apply_fsdp_setting(plan, w, setting);
  return {std::move(plan), false,
          reshard ? fmt::format("gathered again for backward, {} unit(s) ahead",
                                setting.backward_prefetch)
                  : std::string("gathered parameters kept for backward")};
}

}  // namespace

PolicyDecision decide_fsdp_full_shard(Evaluator& /*evaluator*/, const NetworkView& view) {
  return fsdp_decision(view, "fsdp-full-shard", true);
}

PolicyDecision decide_fsdp_shard_grad_op(Evaluator& /*evaluator*/, const NetworkView& view) {
  return fsdp_decision(view, "fsdp-shard-grad-op", false);
}

}  // namespace memplan::search
