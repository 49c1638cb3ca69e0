#include "core/fsdp_setting.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace memplan::sim {

std::vector<std::size_t> gathered_parameter_maps(const std::vector<FeatureMap>& maps,
                                                 const Workload& workload) {
  std::vector<std::size_t> out;
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const Op& producer = workload.op(workload.tensor(maps[m].tensor).producer);
    if (!producer.collective || producer.collective->kind != CollectiveKind::kAllGather) continue;
    const bool from_shards =
        std::all_of(producer.inputs.begin(), producer.inputs.end(),
                    [&](TensorId in) { return is_preexisting(workload.tensor(in).kind); });
    if (from_shards) out.push_back(m);
  }
  return out;
}

namespace {

// The root among the gathered maps `units` (Note [FSDP's setting in a plan]): the one backward
// reads first, or maps.size() for none.
std::size_t root_unit(const std::vector<FeatureMap>& maps, const std::vector<std::size_t>& units) {
  std::size_t root = maps.size();
  for (std::size_t m : units) {
    if (root == maps.size() || maps[m].backward_uses.front() < maps[root].backward_uses.front())
      root = m;
  }
  return root;
}

}  // namespace

void apply_fsdp_setting(Plan& plan, const Workload& workload, const FsdpSetting& setting) {
  const std::vector<FeatureMap> maps = find_feature_maps(workload);
  MEMPLAN_CHECK(plan.decisions.size() == maps.size(), "a plan decides every feature map");
  std::vector<std::size_t> units = gathered_parameter_maps(maps, workload);
  const std::size_t root = root_unit(maps, units);
  for (std::size_t m : units) {
    Decision& d = plan.decisions[m];
    d = Decision{d.tensor, Action::kKeep, Encoding::kNone, kNoOp};
  }
  if (!setting.reshard_after_forward) return;
  // Backward order, the root's place in it included: by first backward use.
  std::sort(units.begin(), units.end(), [&](std::size_t a, std::size_t b) {
    return maps[a].backward_uses.front() < maps[b].backward_uses.front();
  });
  const auto ahead = static_cast<std::size_t>(setting.backward_prefetch);
  for (std::size_t k = 0; k < units.size(); ++k) {
    if (units[k] == root) continue;
    Decision& d = plan.decisions[units[k]];
    d.action = Action::kRecompute;
    const OpId issue = maps[units[k >= ahead ? k - ahead : 0]].backward_uses.front();
    if (issue != maps[units[k]].backward_uses.front()) d.prefetch_before = issue;
  }
}

void apply_workload_fsdp_setting(Plan& plan, const Workload& workload) {
  if (workload.distributed && workload.distributed->fsdp)
    apply_fsdp_setting(plan, workload, *workload.distributed->fsdp);
}

}  // namespace memplan::sim
