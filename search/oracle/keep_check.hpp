#pragma once
// KeepCheck: whether a plan fits with some of its swapped maps kept instead, without lowering
// each trial (Note [Keeping a swapped map, incrementally] in keep_check.cpp). PoocH's keep scans
// try thousands of such changes on one plan (ResNet-1517: a lowering and an allocation replay of
// 130,000 instructions each); this lowers the plan once and replays its allocations with the
// changes edited in, which is what Evaluator::check_memory of the changed plan finds.
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "memory/device_memory.hpp"
#include "search/oracle/evaluator.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

class KeepCheck {
 public:
  /// The workload must outlive the KeepCheck; the machine is copied.
  KeepCheck(const sim::Workload& workload, const sim::Machine& machine);

  /// Takes `plan` as the plan the trials change (one lowering). Returns whether trials on it can
  /// be checked here: the arena allocator, every map kept or swapped with its default release
  /// point, nothing placed on the host.
  bool rebase(const sim::Plan& plan);
  /// What one trial edits and replays; one per thread checking trials at the same time.
  class Scratch {
    friend class KeepCheck;
    std::vector<char> skip_;            // per position in ops_, during a check
    std::vector<sim::BufferId> alias_;  // per buffer: the buffer whose block it frees
    MemoryReplay replay_;
  };

  /// Evaluator::check_memory of the base plan with the maps `keep` (indices into the plan's
  /// decisions, each swapped in the base) kept instead: feasible, and for a plan that does not
  /// fit oom_op and oom_bytes_missing. nullopt when a map of `keep` is not swapped in the base or
  /// its lowering has not the two copies of the Note (one never leaves the device). Requires a
  /// rebase that returned true.
  std::optional<Evaluation> check(const std::vector<int>& keep) { return check(keep, scratch_); }
  /// The same with the caller's scratch: calls with different scratches may run at once (the
  /// base is only read).
  std::optional<Evaluation> check(const std::vector<int>& keep, Scratch& scratch);
  /// Trials checked so far.
  [[nodiscard]] std::size_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct Swapped {                   // a swapped map's two device copies, as positions in ops_
    std::int32_t forward_free = -1;  // the forward copy's free after its last forward use
    std::int32_t fetch_alloc = -1;   // the prefetched copy's allocation
    sim::BufferId forward = sim::kNoBuffer;
    sim::BufferId fetched = sim::kNoBuffer;
  };

  const sim::Workload* workload_;
  sim::Machine machine_;
  sim::Lowerer lowerer_;
  sim::Program program_;
  std::vector<MemoryOp> ops_;     // the base program's allocs and frees, in order
  std::vector<Swapped> swapped_;  // per decision
  Scratch scratch_;               // check()'s without one
  bool ready_ = false;
  std::atomic<std::size_t> count_{0};
};

}  // namespace memplan::search
