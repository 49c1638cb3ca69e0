#pragma once
// Lowering: Plan -> Program (docs/simulator.md "Lowering"). One pass over the ops in issue order
// keeps, for every tensor, the device buffer that currently holds its contents; an op whose input
// is not resident gets it back first (prefetch wait, decode, or recompute of its producer,
// recursively). Frees are placed after the last compute instruction that references a buffer, so
// every buffer dies as early as the plan allows, and regenerated tensors live exactly as long as
// some later instruction needs them. The lowering is deterministic: same workload and plan, same
// Program.
//
// A Lowerer computes what does not depend on the plan (liveness, feature maps) once per workload
// and keeps its scratch buffers, so a search lowering thousands of plans of one workload per
// thread does little allocation. Use one Lowerer per thread.
#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include "sim/feature_maps.hpp"
#include "sim/plan.hpp"
#include "sim/program.hpp"
#include "sim/workload.hpp"

namespace memplan::sim {

class Lowerer {
 public:
  /// Requires a validated workload that outlives the Lowerer.
  explicit Lowerer(const Workload& workload);

  /// Lowers a plan that validate_plan accepts for the workload into `out` (its old contents are
  /// replaced; its capacity is reused).
  void lower(const Plan& plan, Program& out);

  class Checkpoint;
  /// lower(), keeping in `checkpoint` the lowering's state where the backward pass starts (Note
  /// [Resuming a lowering]); the checkpoint is left empty for a plan with host placement or a
  /// workload without a backward pass.
  void lower(const Plan& plan, Program& out, Checkpoint& checkpoint);

  /// How resume() can lower a plan from a checkpoint (Note [Resuming a lowering]).
  enum class Resumable {
    kNo,
    kEquivalent,  // its Program runs as lower()'s does (the same allocations, copies, times,
                  // stalls and peaks; a free can come later between the same two allocations)
    kExact        // its Program is lower()'s
  };
  [[nodiscard]] Resumable resumable(const Plan& plan, const Checkpoint& from) const;
  /// What resume() did: how it lowered (kNo: nothing), and whether the compute stream before the
  /// checkpoint's op is the checkpoint's plan's, frees included (Checkpoint::placed_size): the
  /// plan frees the same buffers there.
  struct Resumption {
    Resumable how = Resumable::kNo;
    bool same_prefix = false;
  };
  /// Lowers `plan` from the checkpoint on into `out`, as resumable() allows.
  Resumption resume(const Plan& plan, const Checkpoint& from, Program& out);
  /// Resumes that restored only what the previous one changed (Note [Rewinding a resumed
  /// lowering]) instead of copying the checkpoint's part of the Program.
  [[nodiscard]] std::size_t rewinds() const { return rewinds_; }

 private:
  // Lists of items per key, stored flat: items[begin[index(key)] .. begin[index(key) + 1]).
  template <typename Key, typename Item>
  struct Lists {
    std::vector<std::int32_t> begin;
    std::vector<Item> items;
    void build(std::size_t key_count, const std::vector<std::pair<Key, Item>>& entries);
  };
  using PerOp = Lists<OpId, TensorId>;  // tensors per op

  struct Frame {
    TensorId wanted;  // the tensor this re-run is for
    OpId op;
    std::size_t next_input;
    std::size_t operand_base;
  };

  void start_program(const Plan& plan);
  void lower_keeping(const Plan& plan, Program& out, Checkpoint* checkpoint);
  void lower_ops(const Plan& plan, std::size_t begin, Checkpoint* checkpoint);
  void keep_state(const Plan& plan, Checkpoint& c) const;
  void keep_placed(Checkpoint& c) const;
  bool rewind(const Checkpoint& from);
  void forget_copy_outs(const Plan& plan, const Checkpoint& from);
  void forget_waits(std::vector<Instruction>& stream, std::vector<std::size_t>* changed) const;
  bool place_frees_after(const Checkpoint& from, bool rewound);
  void sort_frees(std::size_t from);
  [[nodiscard]] bool prefix_reads_same(const Decision& a, const Decision& b, OpId start) const;
  void plan_drop_points(const Plan& plan);
  void place_preexisting();
  void lower_op(const Plan& plan, OpId op);
  void emit_op(OpId op, InstrKind kind);
  void finish_op(OpId op, InstrKind kind, std::size_t base);
  BufferId ensure(TensorId t, OpId for_op);
  BufferId make_resident(TensorId t, OpId for_op);
  void regenerate(TensorId t);
  void forget_per_use();
  [[nodiscard]] bool restorable(TensorId t) const;
  void issue_copy_out(TensorId t, OpId producer);
  void issue_prefetch(TensorId t, OpId at_op);
  void forward_drop(TensorId t, OpId op);
  void release(TensorId t, OpId op);
  void plan_host_placement(const Plan& plan);
  void host_drop(TensorId t, OpId op);
  void emit_host_update(OpId op);
  void place_frees();
  std::int64_t emit(const Instruction& in);
  void touch(BufferId b, std::int64_t when);
  BufferId new_buffer(const Buffer& buffer, OpId for_op);
  BufferId new_tensor_buffer(TensorId t, OpId for_op);
  EventId new_event(WaitCause cause, TensorId t);

  // What the lowering reads of tensors and ops, packed: a Tensor or an Op is hundreds of bytes
  // with strings and its own vectors on the heap, and reading them costs a cache miss per op.
  struct TensorInfo {
    Bytes bytes;
    OpId producer;
    TensorId in_place_of;
    TensorKind kind;
  };
  struct OpInfo {
    Nanoseconds duration_ns;
    Bytes workspace_bytes;
    Phase phase;
  };

  // Per workload.
  const Workload& w_;
  std::vector<TensorInfo> tensor_;
  std::vector<OpInfo> op_;
  PerOp inputs_;   // each op's inputs, in order
  PerOp outputs_;  // each op's outputs, in order
  std::vector<FeatureMap> maps_;
  std::vector<std::int32_t> map_of_;  // tensor -> index into maps_, -1 when not a feature map
  struct MapPoints {                  // per map, where a plan's decision for it acts by default
    OpId last_forward_use;            // last_forward_use(): where a map not kept leaves the device
    OpId default_prefetch;            // default_prefetch_point()
  };
  std::vector<MapPoints> map_points_;
  PerOp drop_at_;                  // tensors whose last use (in the original order) is the op
  Lists<TensorId, OpId> readers_;  // per tensor: the ops that read it, ascending (with repeats)
  std::vector<TensorId> preexisting_read_;  // allocated before the step, in tensor id order
  OpId backward_start_ = kNoOp;             // the first op that is not a forward op
  Nanoseconds op_compute_ns_ = 0;
  HostProgram host_;

  // Per plan (scratch, reused).
  Program* program_ = nullptr;
  // What the lowering knows of each tensor, in one record so that looking a tensor up is one
  // cache line, not seven.
  struct TensorState {
    const Decision* decision = nullptr;  // the plan's decision for a feature map
    BufferId loc = kNoBuffer;            // the buffer holding it now, kNoBuffer when not resident
    HostSlotId slot = kNoHostSlot;       // its host copy (swap)
    EventId in_event = kNoEvent;         // its prefetch has landed
    EventId out_event = kNoEvent;        // its copy-out has read it
    BufferId encoded = kNoBuffer;        // its encoded buffer (encode)
    BufferId releasing = kNoBuffer;      // a swapped map's device copy, until its release point
    std::uint8_t awaiting_in = 0;        // a prefetch is in flight: wait for in_event first
    std::uint8_t host = 0;               // placed on the host (Note [Host placement])
  };
  std::vector<TensorState> state_;
  std::vector<const Algorithm*> algorithm_;  // per op: the plan's choice, or null for the default
  std::vector<std::pair<OpId, TensorId>> entries_;
  std::vector<std::pair<OpId, TensorId>> prefetches_;
  std::vector<std::pair<OpId, TensorId>> releases_;
  std::vector<std::tuple<OpId, OpId, TensorId>> host_prefetches_;
  std::vector<HostUseGroup> groups_;  // of one host-placed tensor
  PerOp prefetch_at_;
  PerOp forward_drop_at_;
  PerOp release_at_;               // swapped maps released before the op (Note [Release point])
  PerOp host_drop_at_;             // host-placed tensors whose device copy goes after the op
  std::vector<Instruction> body_;  // the compute stream being built (its storage, swapped)
  std::vector<std::int64_t> last_ref_;
  std::vector<BufferId> operand_stack_;  // operands of the ops being emitted, innermost on top
  std::vector<Frame> frames_;            // regenerations in progress
  std::vector<TensorId> regenerated_;    // made resident by recomputes for the op being emitted
  std::vector<std::int32_t> free_begin_;
  std::vector<BufferId> free_items_;
  std::vector<std::uint8_t> forgotten_;  // per event: of a copy-out resume() forgets
  // What the last resume() changed in the part of its Program and body before the checkpoint's op
  // (Note [Rewinding a resumed lowering]); `generation` is 0 when there is nothing to rewind.
  struct Rewind {
    std::uint64_t generation = 0;  // of the checkpoint it resumed from
    const Program* program = nullptr;
    std::array<std::size_t, kStreamCount> stream_sizes{};  // as the resume left them
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
/// Filled by Lowerer::lower, read by Lowerer::resume (any Lowerer of the same workload).
class Lowerer::Checkpoint {
 public:
  [[nodiscard]] bool empty() const { return at_ == kNoOp; }
  /// The first op that resume() lowers.
  [[nodiscard]] OpId at() const { return at_; }
  /// Compute-stream instructions of the checkpoint's plan before at(), frees included.
  [[nodiscard]] std::size_t placed_size() const { return placed_.size(); }

 private:
  friend class Lowerer;
  OpId at_ = kNoOp;
  // Distinct for every state kept (a copy keeps it, with the same state): Note [Rewinding a
  // resumed lowering].
  std::uint64_t generation_ = 0;
  std::vector<Decision> decisions_;  // the plan's, which the state refers to
  std::vector<AlgorithmChoice> algorithms_;
  std::vector<TensorState> state_;
  std::vector<std::int64_t> last_ref_;
  std::vector<Instruction> body_;
  Program program_;  // all but the compute stream
  // Once the plan is lowered to its end: its compute stream before `at_` (frees placed), where
  // each op's instructions start in it, and per buffer made before `at_` whether it is freed
  // there.
  std::vector<Instruction> placed_;
  std::vector<std::size_t> placed_dispatch_at_;
  std::vector<std::uint8_t> freed_before_;
};

/// Convenience: lowers one plan with a fresh Lowerer.
Program lower(const Workload& workload, const Plan& plan);

}  // namespace memplan::sim
