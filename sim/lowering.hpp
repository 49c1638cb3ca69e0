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
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "core/feature_maps.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"

namespace memplan::sim {

class Lowerer {
 public:
  /// Requires a validated workload that outlives the Lowerer.
  explicit Lowerer(const Workload& workload);

  /// Lowers a plan that validate_plan accepts for the workload into `out` (its old contents are
  /// replaced; its capacity is reused).
  void lower(const Plan& plan, Program& out);

  /// Lowerings started so far (lower(), and a search's lowerings that keep a checkpoint).
  [[nodiscard]] std::uint64_t lowerings() const { return lowerings_; }

 protected:
  // For a lowering kept where the backward pass starts and resumed there for another plan
  // (search::ResumableLowerer, search/oracle/resumed_lowering.hpp: Note [Resuming a lowering]):
  // the steps of lower() and the state a checkpoint keeps. lower() is start(), lower_ops() over
  // every op, then finish(); a resumption restores the state below as the checkpoint kept it and
  // lowers the ops after it.

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
  struct MapPoints {        // per map, where a plan's decision for it acts by default
    OpId last_forward_use;  // last_forward_use(): where a map not kept leaves the device
    OpId default_prefetch;  // default_prefetch_point()
  };
  // last_ref_ of a buffer that is never freed (a persistent tensor's).
  static constexpr std::int64_t kNeverFreed = std::numeric_limits<std::int64_t>::max();

  // Starts lowering `plan` into `out`: clears both the Program and the per-plan scratch, places
  // the plan's drop and prefetch points and the buffers of pre-existing tensors. Counts a
  // lowering.
  void start(const Plan& plan, Program& out);
  // Lowers ops [begin, end) in issue order.
  void lower_ops(const Plan& plan, std::size_t begin, std::size_t end);
  // Places the frees (place_frees) and lets go of the Program.
  void finish();
  // Clears the Program being lowered (program_) and the per-plan scratch; charges the compute
  // time of the plan's algorithm choices and of an update it moves to the host.
  void start_program(const Plan& plan);
  // Points each map's state at the plan's decision; the plan's drop and prefetch points.
  void plan_drop_points(const Plan& plan);
  // Sorts the frees of body instructions `from` on by the instruction they follow: the frees of
  // instruction from + i are free_items_[free_begin_[i] .. free_begin_[i + 1]).
  void sort_frees(std::size_t from);
  // Writes the compute stream: the body with each buffer's free right after its last reference.
  void place_frees();
  // place_frees for a workload with side streams.
  void place_side_frees();

  [[nodiscard]] std::size_t op_count() const { return op_.size(); }
  // Some op runs on a side stream (Note [Device streams] in core/workload.hpp).
  [[nodiscard]] bool has_side_streams() const { return !side_ops_.empty(); }
  // The first op that is not a forward op (kNoOp: none).
  [[nodiscard]] OpId backward_start() const { return backward_start_; }
  [[nodiscard]] OpId producer(TensorId t) const { return tensor_[index(t)].producer; }
  // Where a plan's decision for feature map `t` acts by default.
  [[nodiscard]] const MapPoints& map_points(TensorId t) const {
    return map_points_[static_cast<std::size_t>(map_of_[index(t)])];
  }

  Program* program_ = nullptr;          // the Program being lowered
  std::vector<TensorState> state_;      // per tensor
  std::vector<std::int64_t> last_ref_;  // per buffer: its last reference in body_, or kNeverFreed
  std::vector<Instruction> body_;       // the compute stream being built (its storage, swapped)
  // Per buffer, only for a workload with side streams: the last side-stream run (an index into
  // side_runs_) that used it, which its free waits for (-1: none).
  std::vector<std::int32_t> side_use_;
  // Each run of a side-stream op, in the order the lowering emits them (the order of each side
  // stream's list): an op of the workload's, or its re-run by a recomputation.
  struct SideRun {
    OpId op;
    EventId end;          // recorded on its stream when it ends
    std::int32_t stream;  // the workload's device stream
  };
  std::vector<SideRun> side_runs_;
  std::vector<std::int32_t> free_begin_;  // sort_frees()'s
  std::vector<BufferId> free_items_;

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

  void place_preexisting();
  void lower_op(const Plan& plan, OpId op);
  void emit_op(OpId op, InstrKind kind);
  void emit_side_op(OpId op, std::size_t base, bool rerun);
  void wait_for_streams(OpId op, std::vector<Instruction>& stream);
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
    std::int32_t stream;      // the workload's device stream (0: compute)
    std::int32_t collective;  // index into collectives_, or -1
    bool ends_node;           // ends_backward_node()
  };
  // Side streams (Note [Device streams] in core/workload.hpp): each op on a side stream has two
  // events, made first in every Program, so their ids depend on the workload alone — event
  // 2k is "the compute stream has issued side op k", 2k + 1 "side op k has ended".
  [[nodiscard]] bool side(OpId op) const { return op_[index(op)].stream != 0; }
  [[nodiscard]] EventId issue_event(OpId op) const { return event_id(2 * side_index_[index(op)]); }
  [[nodiscard]] EventId end_event(OpId op) const {
    return event_id(2 * side_index_[index(op)] + 1);
  }

  // Per workload.
  const Workload& w_;
  std::vector<TensorInfo> tensor_;
  std::vector<OpInfo> op_;
  PerOp inputs_;   // each op's inputs, in order
  PerOp outputs_;  // each op's outputs, in order
  std::vector<FeatureMap> maps_;
  std::vector<std::int32_t> map_of_;  // tensor -> index into maps_, -1 when not a feature map
  std::vector<MapPoints> map_points_;
  std::vector<Collective> collectives_;  // of the workload's collective ops, in issue order
  // Per process group (numbered in order of appearance): the sequence number its first re-run
  // collective takes (one past the workload's last); next_sequence_ is this plan's.
  std::vector<std::int64_t> first_rerun_sequence_, next_sequence_;
  std::vector<std::int32_t> group_of_;    // per collectives_ entry: its process group's number
  std::vector<std::int32_t> side_index_;  // per op: its number among side-stream ops, or -1
  std::vector<OpId> side_ops_;            // the side-stream ops in issue order
  std::size_t stream_count_ = kFixedStreamCount;  // of every Program
  PerOp drop_at_;                  // tensors whose last use (in the original order) is the op
  Lists<TensorId, OpId> readers_;  // per tensor: the ops that read it, ascending (with repeats)
  std::vector<TensorId> preexisting_read_;  // allocated before the step, in tensor id order
  OpId backward_start_ = kNoOp;             // the first op that is not a forward op
  Nanoseconds op_compute_ns_ = 0;
  HostProgram host_;

  // Per plan (scratch, reused); program_, state_, last_ref_, body_ and the frees above.
  std::vector<const Algorithm*> algorithm_;  // per op: the plan's choice, or null for the default
  std::vector<std::pair<OpId, TensorId>> entries_;
  std::vector<std::pair<OpId, TensorId>> prefetches_;
  std::vector<std::pair<OpId, TensorId>> releases_;
  std::vector<std::tuple<OpId, OpId, TensorId>> host_prefetches_;
  std::vector<HostUseGroup> groups_;  // of one host-placed tensor
  PerOp prefetch_at_;
  PerOp forward_drop_at_;
  PerOp release_at_;    // swapped maps released before the op (Note [Release point])
  PerOp host_drop_at_;  // host-placed tensors whose device copy goes after the op
  // A host update's gradients, which its first host run waits for (emptied there).
  std::vector<TensorId> host_update_gradients_;
  // The last update op in issue order (kNoOp without any): under a host update the compute
  // stream waits there for the updated master copies (emit_host_update).
  OpId last_update_op_ = kNoOp;
  std::vector<BufferId> operand_stack_;     // operands of the ops being emitted, innermost on top
  std::vector<Frame> frames_;               // regenerations in progress
  std::vector<TensorId> regenerated_;       // made resident by recomputes for the op being emitted
  std::vector<TensorId> node_regenerated_;  // and for the backward node's ops before it
  std::uint64_t lowerings_ = 0;
};

/// Convenience: lowers one plan with a fresh Lowerer.
Program lower(const Workload& workload, const Plan& plan);

/// A copy that a recomputation makes and no run of the step reads — an input of a recomputed map's
/// producer that was gone and is no map (Lowerer::regenerate), or an output of a re-run op that
/// nothing needs (a sibling; a kept map's after its last use) — and the re-run that reads or
/// writes it last, after which the lowering frees its buffer: the `occurrence`-th re-run (from 0)
/// of op `rerun` in the step. For what carries a plan out elsewhere (memplan.torch), which must
/// let such a copy go where the lowering frees it, not hold it to the end of the step. `tensor`
/// is the last version the buffer held (an op that writes in place puts its output in its
/// input's buffer).
struct RegeneratedFree {
  TensorId tensor = kNoTensor;
  OpId rerun = kNoOp;
  std::int32_t occurrence = 0;
};

/// Every such copy of `program`, a lowering of a plan of `workload`, in the order of their last
/// re-runs. A regenerated copy a run of the step reads (a map's, brought back for its backward
/// use) is held and dropped at the map's own points: not listed.
std::vector<RegeneratedFree> regenerated_frees(const Workload& workload, const Program& program);

/// Whether the workload records a host side (an op's host side, or the launch cost of the
/// instructions a plan adds): its Program's HostProgram is then active, whatever the plan, and
/// the step back to back may be shorter than the step alone (Note [Step period] in engine.hpp).
bool has_host_side(const Workload& workload);

}  // namespace memplan::sim
