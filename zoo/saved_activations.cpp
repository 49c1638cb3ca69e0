#include "zoo/saved_activations.hpp"

#include <vector>

#include "core/liveness.hpp"

namespace memplan::zoo {

sim::Bytes saved_activation_bytes(const sim::Workload& workload) {
  const sim::Liveness liveness = sim::analyze_liveness(workload);
  std::vector<char> counted(liveness.storages.size(), 0);
  sim::Bytes total = 0;
  for (const sim::Op& op : workload.ops) {
    if (op.phase != sim::Phase::kBackward) continue;
    for (sim::TensorId t : op.inputs) {
      const sim::Tensor& tensor = workload.tensor(t);
      if (tensor.kind != sim::TensorKind::kActivation && tensor.kind != sim::TensorKind::kInput)
        continue;
      const std::size_t s = liveness.storage_of[index(t)];
      if (counted[s] != 0) continue;
      counted[s] = 1;
      total += liveness.storages[s].bytes;
    }
  }
  return total;
}

}  // namespace memplan::zoo
