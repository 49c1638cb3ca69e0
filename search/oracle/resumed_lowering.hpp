#pragma once
// ResumableLowerer: a Lowerer that keeps its state where the backward pass starts (a Checkpoint)
// and lowers another plan from there (Note [Resuming a lowering] in resumed_lowering.cpp). PoocH's
// step 3 checks hundreds of plans that share the forward pass with the plan it starts from; each
// lowers only the backward pass, half the step, and a resume from the same checkpoint into the
// same Program rewinds what the previous one changed instead of copying the checkpoint again
// (Note [Rewinding a resumed lowering]). It is the oracle's cache (search/oracle/evaluator.hpp),
// not the simulator's: sim::Lowerer only lowers, and exposes to it the steps and state it needs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

class ResumableLowerer : public sim::Lowerer {
 public:
  /// Requires a validated workload that outlives the ResumableLowerer.
  explicit ResumableLowerer(const sim::Workload& workload) : Lowerer(workload) {}

  using Lowerer::lower;
  class Checkpoint;
  /// lower(), keeping in `checkpoint` the lowering's state where the backward pass starts (Note
  /// [Resuming a lowering]); the checkpoint is left empty for a plan with host placement or a
  /// workload without a backward pass.
  void lower(const sim::Plan& plan, sim::Program& out, Checkpoint& checkpoint);

  /// How resume() can lower a plan from a checkpoint (Note [Resuming a lowering]).
  enum class Resumable {
    kNo,
    kEquivalent,  // its Program runs as lower()'s does (the same allocations, copies, times,
                  // stalls and peaks; a free can come later between the same two allocations)
    kExact        // its Program is lower()'s
  };
  [[nodiscard]] Resumable resumable(const sim::Plan& plan, const Checkpoint& from) const;
  /// The same for a checkpoint that lower(base, ..., checkpoint) would keep, without keeping it:
  /// whether one is worth keeping for `plan`.
  [[nodiscard]] Resumable resumable(const sim::Plan& plan, const sim::Plan& base) const;
  /// What resume() did: how it lowered (kNo: nothing), and whether the compute stream before the
  /// checkpoint's op is the checkpoint's plan's, frees included (Checkpoint::placed_size): the
  /// plan frees the same buffers there.
  struct Resumption {
    Resumable how = Resumable::kNo;
    bool same_prefix = false;
  };
  /// Lowers `plan` from the checkpoint on into `out`, as resumable() allows.
  Resumption resume(const sim::Plan& plan, const Checkpoint& from, sim::Program& out);
  /// Resumes that restored only what the previous one changed (Note [Rewinding a resumed
  /// lowering]) instead of copying the checkpoint's part of the Program.
  [[nodiscard]] std::size_t rewinds() const { return rewinds_; }

 private:
  [[nodiscard]] Resumable resumable(const sim::Plan& plan,
                                    const std::vector<sim::Decision>& decisions,
                                    const std::vector<sim::AlgorithmChoice>& algorithms) const;
  void keep_state(const sim::Plan& plan, Checkpoint& c) const;
  void keep_placed(Checkpoint& c, const sim::Program& out) const;
  [[nodiscard]] bool prefix_reads_same(const sim::Decision& a, const sim::Decision& b,
                                       sim::OpId start) const;
  void restore(const sim::Plan& plan, const Checkpoint& from, sim::Program& out);
  bool rewind(const Checkpoint& from);
  void forget_copy_outs(const sim::Plan& plan, const Checkpoint& from);
  void forget_waits(std::vector<sim::Instruction>& stream, std::vector<std::size_t>* changed) const;
  bool place_frees_after(const Checkpoint& from, bool rewound);
  void keep_rewind(const Checkpoint& from, const sim::Program& out);

  std::vector<std::uint8_t> forgotten_;  // per event: of a copy-out resume() forgets
  // What the last resume() changed in the part of its Program and body before the checkpoint's op
  // (Note [Rewinding a resumed lowering]); `generation` is 0 when there is nothing to rewind.
  struct Rewind {
    std::uint64_t generation = 0;  // of the checkpoint it resumed from
    std::uint64_t lowerings = 0;   // lowerings() then: a lowering since leaves nothing to rewind
    const sim::Program* program = nullptr;
    std::array<std::size_t, sim::kFixedStreamCount> stream_sizes{};  // as the resume left them
    std::size_t operands = 0;
    std::size_t buffers = 0;
    std::size_t events = 0;
    std::size_t host_slots = 0;
    std::size_t body = 0;
    std::vector<std::size_t> waits;           // compute-stream positions turned into records
    std::vector<std::size_t> events_changed;  // events made swap-out events
    bool d2h_changed = false;                 // copy-outs taken off the device-to-host stream
  };
  Rewind rewind_;
  std::size_t rewinds_ = 0;
};

/// A lowering stopped where the backward pass starts: the Lowerer's state and the Program so far.
/// Filled by ResumableLowerer::lower, read by ResumableLowerer::resume (any of the same workload).
class ResumableLowerer::Checkpoint {
 public:
  [[nodiscard]] bool empty() const { return at_ == sim::kNoOp; }
  /// The first op that resume() lowers.
  [[nodiscard]] sim::OpId at() const { return at_; }
  /// Compute-stream instructions of the checkpoint's plan before at(), frees included.
  [[nodiscard]] std::size_t placed_size() const { return placed_.size(); }

 private:
  friend class ResumableLowerer;
  sim::OpId at_ = sim::kNoOp;
  // Distinct for every state kept (a copy keeps it, with the same state): Note [Rewinding a
  // resumed lowering].
  std::uint64_t generation_ = 0;
  std::vector<sim::Decision> decisions_;  // the plan's, which the state refers to
  std::vector<sim::AlgorithmChoice> algorithms_;
  std::vector<TensorState> state_;
  std::vector<std::int64_t> last_ref_;
  std::vector<sim::Instruction> body_;
  sim::Program program_;  // all but the compute stream
  // Once the plan is lowered to its end: its compute stream before `at_` (frees placed), where
  // each op's instructions start in it, and per buffer made before `at_` whether it is freed
  // there.
  std::vector<sim::Instruction> placed_;
  std::vector<std::size_t> placed_dispatch_at_;
  std::vector<std::uint8_t> freed_before_;
};

}  // namespace memplan::search
