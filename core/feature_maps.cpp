#include "core/feature_maps.hpp"

namespace memplan::sim {

std::vector<FeatureMap> find_feature_maps(const Workload& workload) {
  std::vector<FeatureMap> by_tensor(workload.tensors.size());
  std::vector<char> read_again(workload.tensors.size(), 0);  // by forward after backward
  for (const Op& op : workload.ops) {
    for (TensorId t : op.inputs) {
      auto& fm = by_tensor[index(t)];
      if (op.phase == Phase::kForward) {
        if (!fm.backward_uses.empty()) read_again[index(t)] = 1;
        fm.forward_uses.push_back(op.id);
      }
      if (op.phase == Phase::kBackward) fm.backward_uses.push_back(op.id);
    }
  }
  std::vector<FeatureMap> result;
  for (const Tensor& t : workload.tensors) {
    auto& fm = by_tensor[index(t.id)];
    if (t.kind != TensorKind::kActivation || t.producer == kNoOp || t.lifetime_only) continue;
    if (workload.op(t.producer).phase != Phase::kForward || fm.backward_uses.empty()) continue;
    if (read_again[index(t.id)] != 0) continue;  // Note [Feature maps of micro-batches]
    fm.tensor = t.id;
    result.push_back(std::move(fm));
  }
  return result;
}

}  // namespace memplan::sim
