#pragma once
// Liveness of tensors when every tensor dies right after its last use: the in-core baseline every
// plan is measured against. A tensor written in place over another (`in_place_of`) shares that
// tensor's buffer, so buffers ("storages") rather than tensors are what is allocated and freed.
#include <vector>

#include "core/workload.hpp"

namespace memplan::sim {

/// One device buffer over the iteration: allocated before op `first` runs (or before the step
/// for tensors that already exist: first == kNoOp) and freed after op `last` ends (last ==
/// ops.size() for tensors that outlive the step).
struct Storage {
  TensorId root = kNoTensor;      // the tensor that allocates the buffer
  std::vector<TensorId> tensors;  // root first, then tensors written in place over it
  Bytes bytes = 0;
  OpId first = kNoOp;
  OpId last = kNoOp;
};

struct Liveness {
  std::vector<Storage> storages;
  std::vector<std::size_t> storage_of;  // tensor id -> index into storages
  /// Last op that reads each tensor (kNoOp when none does).
  std::vector<OpId> last_use;
};

/// Requires a validated workload.
Liveness analyze_liveness(const Workload& workload);

struct InCorePeak {
  Bytes bytes = 0;  // live buffers plus the op's workspace, at the worst op
  OpId op = kNoOp;  // the op where the peak is reached (kNoOp for an empty workload)
};

/// Peak device bytes when nothing is swapped, recomputed or encoded and every buffer dies right
/// after its last use. Requires a validated workload.
InCorePeak incore_peak(const Workload& workload);

/// Device bytes of a framework that allocates network-wide with no reuse (Caffe's default, the
/// baseline of vDNN's "average memory" figures): every tensor's buffer (an in-place output shares
/// its input's, as in Caffe) plus every op's own workspace, all held for the whole step.
/// Requires a validated workload.
Bytes no_reuse_bytes(const Workload& workload);

}  // namespace memplan::sim
