#pragma once
// KeepCheck: whether a plan fits with some of a base plan's swapped maps kept instead, without
// lowering it (Note [Keeping a swapped map, incrementally] in keep_check.cpp). PoocH's keep scans
// try thousands of such changes on one plan (ResNet-1517: a lowering and an allocation replay of
// 130,000 instructions each); this lowers the base once and replays its allocations with the
// changes edited in, which is what a lowering of the changed plan replays. One of the oracle's
// ways of answering Evaluator::fits (evaluator.cpp); nothing else uses it.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "search/oracle/memory_replay.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

class KeepCheck {
 public:
  /// The workload must outlive the KeepCheck.
  explicit KeepCheck(const sim::Workload& workload);

  /// Takes `plan` as the plan the trials change, lowered with `lowerer` (of the plan's workload)
  /// on `machine`. Returns whether trials on it can be checked here: the arena allocator, every
  /// map kept or swapped with its default release point, nothing placed on the host.
  bool rebase(const sim::Plan& plan, sim::Lowerer& lowerer, const sim::Machine& machine);
  /// What one trial edits and replays; one per thread checking trials at the same time.
  class Scratch {
    friend class KeepCheck;
    std::vector<char> skip_;            // per position in ops_, during a check
    std::vector<sim::BufferId> alias_;  // per buffer: the buffer whose block it frees
    MemoryReplay replay_;
  };

  /// The allocation replay of the base plan with the maps `keep` (indices into its decisions,
  /// each swapped in the base) kept instead: feasible, peak_reserved_bytes, and for a plan that
  /// does not fit oom_op and oom_bytes_missing. nullopt when a map of `keep` has not the two
  /// device copies of the Note (one never leaves the device, or it is written in place). Requires
  /// a rebase that returned true; calls with different scratches may run at once.
  std::optional<Evaluation> check(const std::vector<int>& keep, Scratch& scratch) const;

 private:
  struct Swapped {                   // a swapped map's two device copies, as positions in ops_
    std::int32_t forward_free = -1;  // the forward copy's free after its last forward use
    std::int32_t fetch_alloc = -1;   // the prefetched copy's allocation
    sim::BufferId forward = sim::kNoBuffer;
    sim::BufferId fetched = sim::kNoBuffer;
  };

  const sim::Workload* workload_;
  sim::Machine machine_;
  sim::Program program_;
  std::vector<MemoryOp> ops_;     // the base program's allocs and frees, in order
  std::vector<Swapped> swapped_;  // per decision
  bool ready_ = false;
};

}  // namespace memplan::search
