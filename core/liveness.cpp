#include "core/liveness.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace memplan::sim {

Liveness analyze_liveness(const Workload& workload) {
  const OpId op_count = op_id(workload.ops.size());
  Liveness result;
  result.last_use.assign(workload.tensors.size(), kNoOp);
  for (const Op& op : workload.ops) {
    for (TensorId t : op.inputs) result.last_use[index(t)] = op.id;
  }
  result.storage_of.assign(workload.tensors.size(), 0);
  // Tensors are visited in id order, but an in-place tensor may come before its base in the list,
  // so roots are resolved by following in_place_of (validate() guarantees chains end).
  auto root_of = [&](TensorId t) {
    while (workload.tensor(t).in_place_of != kNoTensor) t = workload.tensor(t).in_place_of;
    return t;
  };
  std::vector<std::size_t> storage_of_root(workload.tensors.size(), SIZE_MAX);
  for (const Tensor& t : workload.tensors) {
    if (t.in_place_of != kNoTensor) continue;
    Storage s;
    s.root = t.id;
    s.bytes = t.bytes;
    s.first = t.producer;  // kNoOp for tensors that exist before the step
    storage_of_root[index(t.id)] = result.storages.size();
    result.storages.push_back(std::move(s));
  }
  for (const Tensor& t : workload.tensors) {
    const std::size_t s = storage_of_root[index(root_of(t.id))];
    MEMPLAN_CHECK(s != SIZE_MAX, "every in-place chain ends in a tensor that owns its buffer");
    result.storage_of[index(t.id)] = s;
    if (t.in_place_of != kNoTensor) result.storages[s].tensors.push_back(t.id);
  }
  for (Storage& s : result.storages) {
    s.tensors.insert(s.tensors.begin(), s.root);
    std::sort(s.tensors.begin() + 1, s.tensors.end(), [&](TensorId a, TensorId b) {
      return workload.tensor(a).producer < workload.tensor(b).producer;
    });
    if (is_persistent(workload.tensor(s.root).kind)) {
      s.last = op_count;
      continue;
    }
    // Dies after the last read of any tensor in the chain, or right after it is written when
    // nothing reads it.
    OpId last = kNoOp;
    for (TensorId t : s.tensors) {
      last = std::max({last, result.last_use[index(t)], workload.tensor(t).producer});
    }
    s.last = last;
  }
  return result;
}

InCorePeak incore_peak(const Workload& workload) {
  const auto n = workload.ops.size();
  if (n == 0) return {};
  const Liveness liveness = analyze_liveness(workload);
  // delta[i]: bytes that become live when op i starts; a buffer live during ops first..last adds
  // at first (or 0 for pre-existing ones) and leaves after last.
  std::vector<Bytes> delta(n + 1, 0);
  for (const Storage& s : liveness.storages) {
    if (s.last == kNoOp) {
      // A pre-existing buffer nothing reads: resident before the step, freed before op 0 runs.
      continue;
    }
    const std::size_t begin = s.first == kNoOp ? 0 : index(s.first);
    const std::size_t end = std::min(index(s.last), n - 1) + 1;
    delta[begin] += s.bytes;
    delta[end] -= s.bytes;
  }
  InCorePeak peak;
  Bytes live = 0;
  for (std::size_t i = 0; i < n; ++i) {
    live += delta[i];
    const Bytes need = live + workload.ops[i].workspace_bytes;
    if (peak.op == kNoOp || need > peak.bytes) {
      peak.bytes = need;
      peak.op = op_id(i);
    }
  }
  return peak;
}

Bytes no_reuse_bytes(const Workload& workload) {
  Bytes total = 0;
  for (const Tensor& t : workload.tensors) {
    if (t.in_place_of == kNoTensor) total += t.bytes;
  }
  for (const Op& op : workload.ops) total += op.workspace_bytes;
  return total;
}

}  // namespace memplan::sim
