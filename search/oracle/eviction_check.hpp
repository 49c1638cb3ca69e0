#pragma once
// EvictionCheck: where a plan runs out of device memory once some of the maps a base plan keeps
// are evicted (swapped or recomputed instead), without lowering it, as long as it runs out in the
// forward pass (Note [Evicting in the forward pass] in eviction_check.cpp). DTR and SuperNeurons'
// tensor pool evict a few maps at a time where memory runs out and ask again, hundreds to
// thousands of times on ResNet-1517, nearly always running out in the forward pass: this lowers
// the plan they start from once and replays the forward part of its allocations with the evicted
// maps' frees moved up, which is what a lowering of the evicted plan replays there. One of the
// oracle's ways of answering Evaluator::fits (evaluator.cpp); nothing else uses it.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "search/oracle/memory_replay.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

class EvictionCheck {
 public:
  /// The workload must outlive the EvictionCheck.
  explicit EvictionCheck(const sim::Workload& workload);

  /// Takes `plan` as the plan evictions change, lowered with `lowerer` (of the plan's workload)
  /// on `machine`. Returns whether they can be checked here: the arena allocator, every map kept,
  /// swapped or recomputed (no encoding, no release point), nothing on the host.
  bool rebase(const sim::Plan& plan, sim::Lowerer& lowerer, const sim::Machine& machine);
  /// What one check edits and replays; one per thread checking at the same time.
  class Scratch {
    friend class EvictionCheck;
    std::vector<std::pair<std::int32_t, sim::BufferId>> moved_;  // frees moved, by position
    MemoryReplay replay_;
  };
  /// For `plan`, which is the base with the maps `evicted` (indices into its decisions, each kept
  /// in the base) swapped or recomputed and nothing else changed: the allocation replay's answer
  /// when memory runs out before the first op that is not a forward op (not feasible, with its
  /// oom_op, oom_bytes_missing and peak_reserved_bytes). nullopt when the forward ops fit, or
  /// when an eviction is not the shape of the Note (a release point, a prefetch inside the
  /// forward pass, a regeneration that could read a tensor the base frees there): the whole plan
  /// is checked then. Requires a rebase that returned true; calls with different scratches may
  /// run at once.
  std::optional<Evaluation> check(const sim::Plan& plan, const std::vector<int>& evicted,
                                  Scratch& scratch) const;

 private:
  struct Eviction {             // what evicting a map moves in the forward part of ops_
    std::int32_t free_at = -1;  // its free goes before ops_[free_at] (-1: after the forward part)
    sim::BufferId buffer = sim::kNoBuffer;
    sim::OpId default_prefetch = sim::kNoOp;  // where a swap of it prefetches by default
    bool kept = false;                        // in the base
    bool unchecked = false;                   // its buffer is not found as the Note expects
    bool reads_freed = false;  // regenerating it could read a tensor freed in the forward part
  };

  const sim::Workload* workload_;
  sim::Machine machine_;
  sim::Program program_;
  std::vector<MemoryOp> ops_;       // the base program's allocs and frees of its forward part
  std::size_t forward_ops_ = 0;     // ops before the first one that is not a forward op
  std::vector<Eviction> eviction_;  // per decision
  bool ready_ = false;
};

}  // namespace memplan::search
