#include "sim/lowering.hpp"

#include <algorithm>
#include <limits>
#include <span>
#include <string_view>

#include "core/check.hpp"
#include "core/liveness.hpp"

namespace memplan::sim {

namespace {
constexpr std::size_t at(std::int32_t i) {
  return static_cast<std::size_t>(i);
}
}  // namespace

template <typename Key, typename Item>
void Lowerer::Lists<Key, Item>::build(std::size_t key_count,
                                      const std::vector<std::pair<Key, Item>>& entries) {
  // Counting sort by key, stable: items keep the order in which they were listed.
  begin.assign(key_count + 1, 0);
  for (const auto& [key, item] : entries) ++begin[index(key) + 1];
  for (std::size_t i = 0; i < key_count; ++i) begin[i + 1] += begin[i];
  items.resize(entries.size());
  std::vector<std::int32_t>& next = begin;  // filled in place, then shifted back
  for (const auto& [key, item] : entries) items[at(next[index(key)]++)] = item;
  for (std::size_t i = key_count; i > 0; --i) begin[i] = begin[i - 1];
  begin[0] = 0;
}

bool has_host_side(const Workload& workload) {
  return workload.launch_ns.has_value() ||
         std::any_of(workload.ops.begin(), workload.ops.end(),
                     [](const Op& op) { return op.host.has_value(); });
}

namespace {
/// The workload's host side as the engine reads it (Note [Host stream] in sim/engine.hpp): active
/// when some op records one or the workload knows its launch cost.
HostProgram host_program(const Workload& w) {
  HostProgram host;
  host.tail_ns = w.host_tail_ns;
  if (!has_host_side(w)) return host;
  host.launch_ns = w.launch_ns.value_or(0);
  host.ops.reserve(w.ops.size());
  for (const Op& op : w.ops) host.ops.push_back(op.host.value_or(HostSide{}));
  host.dispatch_at.assign(w.ops.size(), 0);  // each lowering fills them in
  return host;
}
}  // namespace

Lowerer::Lowerer(const Workload& workload) : w_(workload), host_(host_program(workload)) {
  tensor_.reserve(w_.tensors.size());
  for (const Tensor& t : w_.tensors)
    tensor_.push_back({t.bytes, t.producer, t.in_place_of, t.kind});
  op_.reserve(w_.ops.size());
  side_index_.assign(w_.ops.size(), -1);
  std::vector<std::pair<OpId, TensorId>> inputs;
  std::vector<std::pair<OpId, TensorId>> outputs;
  std::vector<std::string_view> groups;  // names, by number
  for (const Op& op : w_.ops) {
    std::int32_t collective = -1;
    if (op.collective) {
      collective = static_cast<std::int32_t>(collectives_.size());
      collectives_.push_back(*op.collective);
      const Collective& c = *op.collective;
      const auto group = static_cast<std::size_t>(std::find(groups.begin(), groups.end(), c.group) -
                                                  groups.begin());
      if (group == groups.size()) {
        groups.emplace_back(c.group);
        first_rerun_sequence_.push_back(0);
      }
      group_of_.push_back(static_cast<std::int32_t>(group));
      first_rerun_sequence_[group] = std::max(first_rerun_sequence_[group], c.sequence + 1);
    }
    op_.push_back({op.duration_ns, op.workspace_bytes, op.phase, op.stream, collective,
                   ends_backward_node(workload, op.id)});
    if (op.phase == Phase::kUpdate) last_update_op_ = op.id;
    if (op.stream != 0) {
      side_index_[index(op.id)] = static_cast<std::int32_t>(side_ops_.size());
      side_ops_.push_back(op.id);
    }
    stream_count_ =
        std::max(stream_count_, static_cast<std::size_t>(program_stream(op.stream)) + 1);
    for (TensorId t : op.inputs) inputs.emplace_back(op.id, t);
    for (TensorId t : op.outputs) outputs.emplace_back(op.id, t);
  }
  inputs_.build(w_.ops.size(), inputs);
  outputs_.build(w_.ops.size(), outputs);
  std::vector<std::pair<TensorId, OpId>> readers;
  readers.reserve(inputs.size());
  for (const auto& [op, t] : inputs) readers.emplace_back(t, op);
  readers_.build(w_.tensors.size(), readers);
  maps_ = find_feature_maps(w_);
  map_of_.assign(w_.tensors.size(), -1);
  for (std::size_t i = 0; i < maps_.size(); ++i)
    map_of_[index(maps_[i].tensor)] = static_cast<std::int32_t>(i);
  map_points_.reserve(maps_.size());
  for (const FeatureMap& map : maps_)
    map_points_.push_back({last_forward_use(map, w_), default_prefetch_point(map, w_)});
  const Liveness liveness = analyze_liveness(w_);
  std::vector<bool> read(w_.tensors.size(), false);
  for (const Op& op : w_.ops) {
    if (op.stream == 0) op_compute_ns_ += op.duration_ns;
    for (TensorId t : op.inputs) read[index(t)] = true;
  }
  entries_.clear();
  for (const Tensor& t : w_.tensors) {
    if (is_preexisting(t.kind)) {
      // Cannot be regenerated: stays until its last reference, recomputes included.
      if (read[index(t.id)]) preexisting_read_.push_back(t.id);
      continue;
    }
    const OpId last = liveness.last_use[index(t.id)];
    entries_.emplace_back(last == kNoOp ? t.producer : last, t.id);
  }
  drop_at_.build(w_.ops.size(), entries_);
  for (const Op& op : w_.ops) {
    if (op.phase != Phase::kForward) {
      backward_start_ = op.id;
      break;
    }
  }
}

void Lowerer::lower(const Plan& plan, Program& out) {
  start(plan, out);
  lower_ops(plan, 0, op_.size());
  finish();
}

void Lowerer::start(const Plan& plan, Program& out) {
  ++lowerings_;
  program_ = &out;
  start_program(plan);
  plan_drop_points(plan);
  place_preexisting();
}

void Lowerer::lower_ops(const Plan& plan, std::size_t begin, std::size_t end) {
  node_regenerated_.clear();  // a range starts at a node's first op: 0, or where backward starts
  for (std::size_t i = begin; i < end; ++i) lower_op(plan, op_id(i));
}

void Lowerer::finish() {
  place_frees();
  program_ = nullptr;
}

// Clears the program (keeping its capacity) and the per-plan scratch; charges the compute time of
// the plan's algorithm choices and of an update it moves to the host.
void Lowerer::start_program(const Plan& plan) {
  Program& out = *program_;
  out.streams.resize(stream_count_);
  for (auto& stream : out.streams) stream.clear();
  out.operands.clear();
  out.buffers.clear();
  out.events.clear();
  for (std::size_t k = 0; k < side_ops_.size(); ++k) {  // issue_event, end_event of side op k
    out.events.push_back({WaitCause::kIssue, kNoTensor});
    out.events.push_back({WaitCause::kStream, kNoTensor});
  }
  out.host_slots.clear();
  out.collectives = collectives_;
  out.workload_collectives = collectives_.size();
  out.rank = w_.distributed ? w_.distributed->rank : 0;
  out.world_size = w_.distributed ? w_.distributed->world_size : 1;
  out.op_compute_ns = op_compute_ns_;
  out.action_counts = {};
  out.host = host_;
  algorithm_.assign(w_.ops.size(), nullptr);
  for (const AlgorithmChoice& c : plan.algorithms) {
    const Op& op = w_.op(c.op);
    algorithm_[index(c.op)] = &op.algorithms[at(c.algorithm)];
    out.op_compute_ns += algorithm_[index(c.op)]->duration_ns - op.duration_ns;
  }
  if (plan.host_update) {  // the update runs on the host stream, not on the device
    for (const OpInfo& op : op_) {
      if (op.phase == Phase::kUpdate && op.stream == 0) out.op_compute_ns -= op.duration_ns;
    }
  }
  state_.assign(w_.tensors.size(), TensorState{});
  // The body is built in the compute stream's own storage and expanded in place by place_frees.
  body_.swap(out.streams[static_cast<std::size_t>(StreamId::kCompute)]);
  body_.clear();
  last_ref_.clear();
  side_use_.clear();
  side_runs_.clear();
  next_sequence_ = first_rerun_sequence_;
  operand_stack_.clear();
}

// Drop points and prefetch points of this plan: each decided map's decision and action count, the
// op after which a map the plan does not keep leaves the device, and the op before which a swapped
// map is prefetched; then those of host placement.
void Lowerer::plan_drop_points(const Plan& plan) {
  MEMPLAN_CHECK(plan.decisions.size() == maps_.size(), "a plan decides every feature map");
  entries_.clear();
  prefetches_.clear();
  releases_.clear();
  for (const Decision& d : plan.decisions) {
    const std::int32_t m = map_of_[index(d.tensor)];
    MEMPLAN_CHECK(m >= 0, "a plan decides feature maps only");
    state_[index(d.tensor)].decision = &d;
    ++program_->action_counts[static_cast<std::size_t>(d.action)];
    if (d.action == Action::kKeep) continue;
    const MapPoints& map = map_points_[at(m)];
    entries_.emplace_back(map.last_forward_use, d.tensor);
    if (d.action == Action::kSwap) {
      prefetches_.emplace_back(
          d.prefetch_before != kNoOp ? d.prefetch_before : map.default_prefetch, d.tensor);
      if (d.release_before != kNoOp) releases_.emplace_back(d.release_before, d.tensor);
    } else if (d.action == Action::kRecompute && d.prefetch_before != kNoOp) {
      prefetches_.emplace_back(d.prefetch_before, d.tensor);  // Note [Issue point of a recomp...]
    }
  }
  forward_drop_at_.build(w_.ops.size(), entries_);
  release_at_.build(w_.ops.size(), releases_);
  plan_host_placement(plan);
  prefetch_at_.build(w_.ops.size(), prefetches_);
}

// Buffers of the tensors that exist before the step and are read in it, allocated up front; a
// persistent one is never freed.
void Lowerer::place_preexisting() {
  for (TensorId t : preexisting_read_) {
    if (state_[index(t)].host != 0) continue;  // its home is a host slot
    const BufferId b = new_tensor_buffer(t, kNoOp);
    program_->buffers[index(b)].initial = true;
    if (is_persistent(tensor_[index(t)].kind)) last_ref_[index(b)] = kNeverFreed;
    state_[index(t)].loc = b;
  }
}

// One op in issue order: the prefetches issued before it, the op itself (on the device or, for a
// host update, on the host), then the copy-outs of its outputs and the drops after it.
void Lowerer::lower_op(const Plan& plan, OpId op) {
  const auto i = index(op);
  if (program_->host.active()) program_->host.dispatch_at[i] = body_.size();
  for (auto k = release_at_.begin[i]; k < release_at_.begin[i + 1]; ++k)
    release(release_at_.items[at(k)], op);
  for (auto k = prefetch_at_.begin[i]; k < prefetch_at_.begin[i + 1]; ++k) {
    const TensorId t = prefetch_at_.items[at(k)];
    if (state_[index(t)].loc != kNoBuffer) continue;
    const Decision* d = state_[index(t)].decision;
    if (d != nullptr && d->action == Action::kRecompute) {
      regenerate(t);
    } else {
      issue_prefetch(t, op);
    }
  }
  regenerated_.clear();
  if (plan.host_update && op_[i].phase == Phase::kUpdate) {
    emit_host_update(op);
  } else {
    emit_op(op, InstrKind::kRun);
  }
  if (op_[i].phase == Phase::kBackward) {
    node_regenerated_.insert(node_regenerated_.end(), regenerated_.begin(), regenerated_.end());
    if (op_[i].ends_node) forget_per_use();
  }
  for (auto k = outputs_.begin[i]; k < outputs_.begin[i + 1]; ++k) {
    const TensorId t = outputs_.items[at(k)];
    const Decision* d = state_[index(t)].decision;
    if ((d != nullptr && d->action == Action::kSwap) || state_[index(t)].host != 0)
      issue_copy_out(t, op);
  }
  for (auto k = forward_drop_at_.begin[i]; k < forward_drop_at_.begin[i + 1]; ++k) {
    forward_drop(forward_drop_at_.items[at(k)], op);
  }
  for (auto k = host_drop_at_.begin[i]; k < host_drop_at_.begin[i + 1]; ++k) {
    host_drop(host_drop_at_.items[at(k)], op);
  }
  for (auto k = drop_at_.begin[i]; k < drop_at_.begin[i + 1]; ++k)
    state_[index(drop_at_.items[at(k)])].loc = kNoBuffer;
}

// emit and new_buffer are inlined into their callers, which then build the instruction or buffer
// in place rather than on the stack for a call to copy (out of line, emit was a sixth of exact
// mode's time, most of it stalls reading back the instruction just written).
[[gnu::always_inline]] inline std::int64_t Lowerer::emit(const Instruction& in) {
  body_.push_back(in);
  return static_cast<std::int64_t>(body_.size()) - 1;
}

void Lowerer::touch(BufferId b, std::int64_t when) {
  auto& ref = last_ref_[index(b)];
  if (ref != kNeverFreed) ref = std::max(ref, when);
}

[[gnu::always_inline]] inline BufferId Lowerer::new_buffer(const Buffer& buffer, OpId for_op) {
  const BufferId b = buffer_id(program_->buffers.size());
  program_->buffers.push_back(buffer);
  last_ref_.push_back(emit({InstrKind::kAlloc, for_op, b, -1, 0, 0, 0}));
  if (!side_ops_.empty()) side_use_.push_back(-1);
  return b;
}

BufferId Lowerer::new_tensor_buffer(TensorId t, OpId for_op) {
  const TensorInfo& tensor = tensor_[index(t)];
  return new_buffer({tensor.bytes, BufferRole::kTensor, tensor.kind, t, kNoOp, Encoding::kNone},
                    for_op);
}

EventId Lowerer::new_event(WaitCause cause, TensorId t) {
  program_->events.push_back({cause, t});
  return event_id(program_->events.size() - 1);
}

bool Lowerer::restorable(TensorId t) const {
  if (state_[index(t)].host != 0) return state_[index(t)].slot != kNoHostSlot;
  const Decision* d = state_[index(t)].decision;
  if (d == nullptr) return false;
  return (d->action == Action::kSwap && state_[index(t)].slot != kNoHostSlot) ||
         (d->action == Action::kEncode && state_[index(t)].encoded != kNoBuffer);
}

// Makes tensor t resident before `for_op` runs and returns its buffer.
BufferId Lowerer::ensure(TensorId t, OpId for_op) {
  if (state_[index(t)].loc == kNoBuffer && !restorable(t)) regenerate(t);
  return make_resident(t, for_op);
}

// Brings back a resident-or-restorable tensor (prefetch wait, on-demand prefetch or decode).
BufferId Lowerer::make_resident(TensorId t, OpId for_op) {
  const auto ti = index(t);
  if (state_[ti].loc == kNoBuffer) {
    MEMPLAN_CHECK(restorable(t), "a tensor that is gone is restored or regenerated");
    if (state_[ti].host != 0 || state_[ti].decision->action == Action::kSwap) {
      issue_prefetch(t, for_op);
    } else {
      const BufferId b = new_tensor_buffer(t, for_op);
      const BufferId e = state_[ti].encoded;
      const auto when = emit({InstrKind::kDecode, for_op, b, value(e), 0, 0, 0});
      touch(b, when);
      touch(e, when);
      state_[ti].loc = b;
    }
  }
  if (state_[ti].awaiting_in != 0) {
    touch(state_[ti].loc,
          emit({InstrKind::kWait, for_op, kNoBuffer, value(state_[ti].in_event), 0, 0, 0}));
    state_[ti].awaiting_in = 0;
  }
  MEMPLAN_CHECK(state_[ti].loc != kNoBuffer, "an input is resident before its consumer runs");
  return state_[ti].loc;
}

// Re-runs the producer of t, after making its inputs resident; inputs that are gone too are
// regenerated first. An explicit stack of frames instead of recursion: a 1517-layer chain of
// recomputed maps is thousands of ops deep.
void Lowerer::regenerate(TensorId t) {
  auto push = [&](TensorId tensor) {
    const OpId producer = tensor_[index(tensor)].producer;
    MEMPLAN_CHECK(producer != kNoOp && op_[index(producer)].phase == Phase::kForward,
                  "only tensors written by forward ops are regenerated (validate_plan)");
    frames_.push_back({tensor, producer, 0, operand_stack_.size()});
  };
  push(t);
  while (!frames_.empty()) {
    const Frame frame = frames_.back();
    const auto first = static_cast<std::size_t>(inputs_.begin[index(frame.op)]);
    const auto input_count = static_cast<std::size_t>(inputs_.begin[index(frame.op) + 1]) - first;
    if (frame.next_input < input_count) {
      const TensorId x = inputs_.items[first + frame.next_input];
      if (state_[index(x)].loc == kNoBuffer && !restorable(x)) {
        push(x);  // come back to this input once x is regenerated
        continue;
      }
      operand_stack_.push_back(make_resident(x, frame.op));
      ++frames_.back().next_input;
    } else {
      frames_.pop_back();
      for (auto k = outputs_.begin[index(frame.op)]; k < outputs_.begin[index(frame.op) + 1]; ++k) {
        const TensorId o = outputs_.items[at(k)];
        if (state_[index(o)].loc == kNoBuffer)
          regenerated_.push_back(o);  // not a temporary second copy
      }
      finish_op(frame.op, InstrKind::kRecompute, frame.operand_base);
      MEMPLAN_CHECK(state_[index(frame.wanted)].loc != kNoBuffer,
                    "a regenerated tensor is resident");
    }
  }
}

// Memory-centric recomputation: when a backward node (ends_backward_node) needed a per-use map
// regenerated, that map and the intermediates regenerated to make it are forgotten once the node's
// last op has read them (their buffers are freed after it), so the next node that reads the map
// regenerates it from the checkpoint again. Maps the plan recomputes once (per_use false) that
// were regenerated on the way stay resident. Per node, not per op: autograd unpacks what a node
// saved before its first op and holds it until the node returns, so the node's ops all read one
// regenerated copy (memplan.torch.apply carries it out so).
void Lowerer::forget_per_use() {
  const bool any = std::any_of(node_regenerated_.begin(), node_regenerated_.end(), [&](TensorId t) {
    const Decision* d = state_[index(t)].decision;
    return d != nullptr && d->per_use;
  });
  if (any) {
    for (TensorId t : node_regenerated_) {
      const Decision* d = state_[index(t)].decision;
      if (d == nullptr || d->per_use) state_[index(t)].loc = kNoBuffer;
    }
  }
  node_regenerated_.clear();
}

void Lowerer::emit_op(OpId op, InstrKind kind) {
  const std::size_t base = operand_stack_.size();
  for (auto k = inputs_.begin[index(op)]; k < inputs_.begin[index(op) + 1]; ++k) {
    const BufferId b = ensure(inputs_.items[at(k)], op);
    operand_stack_.push_back(b);
  }
  finish_op(op, kind, base);
}

// With the op's input buffers on the operand stack above `base`: allocates outputs and workspace,
// emits the op and pops its operands.
void Lowerer::finish_op(OpId op, InstrKind kind, std::size_t base) {
  for (auto k = outputs_.begin[index(op)]; k < outputs_.begin[index(op) + 1]; ++k) {
    const TensorId o = outputs_.items[at(k)];
    const TensorInfo& out = tensor_[index(o)];
    BufferId b = kNoBuffer;
    if (out.in_place_of != kNoTensor) {
      // An in-place output takes over its base's buffer.
      b = state_[index(out.in_place_of)].loc;
      MEMPLAN_CHECK(b != kNoBuffer, "the base of an in-place output is resident");
      state_[index(out.in_place_of)].loc = kNoBuffer;
    } else {
      b = new_tensor_buffer(o, op);
    }
    operand_stack_.push_back(b);
    // A recompute may write an output that is still resident elsewhere: then its new copy is a
    // temporary, freed right after (nothing points to it).
    if (kind == InstrKind::kRun || state_[index(o)].loc == kNoBuffer) state_[index(o)].loc = b;
  }
  const Algorithm* chosen = algorithm_[index(op)];
  const OpInfo& info = op_[index(op)];
  const Bytes workspace = chosen != nullptr ? chosen->workspace_bytes : info.workspace_bytes;
  const Nanoseconds duration = chosen != nullptr ? chosen->duration_ns : info.duration_ns;
  if (workspace > 0) {
    const BufferId ws = new_buffer(
        {workspace, BufferRole::kWorkspace, TensorKind::kWorkspace, kNoTensor, op, Encoding::kNone},
        op);
    operand_stack_.push_back(ws);
  }
  if (side(op)) {
    emit_side_op(op, base, kind == InstrKind::kRecompute);
    return;
  }
  if (!side_ops_.empty()) wait_for_streams(op, body_);
  const auto begin = static_cast<std::int32_t>(program_->operands.size());
  const auto count = static_cast<std::int32_t>(operand_stack_.size() - base);
  for (std::size_t k = base; k < operand_stack_.size(); ++k)
    program_->operands.push_back(value(operand_stack_[k]));
  const auto when = emit({kind, op, kNoBuffer, -1, begin, count, duration});
  for (std::size_t k = base; k < operand_stack_.size(); ++k) touch(operand_stack_[k], when);
  operand_stack_.resize(base);
}

// An op of a side stream (Note [Device streams] in core/workload.hpp), its operands on the
// operand stack above `base`: the compute stream marks where it is issued (its buffers' frees come
// after that mark, and wait for the op's end); the side stream waits for that mark, for the other
// streams' ops it depends on, runs the op and records its end.
//
// Note [Re-running a side-stream op]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A recomputation of a map that an op of another stream wrote runs that op again on its stream
// (`rerun`): FSDP gathering a unit's parameters again for backward is the all-gather re-run. The
// re-run has events of its own, made as it is emitted, and a collective re-run is a call of its
// own (a Program::collectives entry): its sequence number follows the workload's last of its
// group and the re-runs before it, so the ranks of a job that share a plan number their re-runs
// alike and the job's simulation matches them (sim/job_simulation.hpp). The compute stream does not
// wait for it where it is issued: an op that reads what it wrote waits for its end first
// (make_resident), so a re-run issued ahead of its use (Note [Issue point of a recomputation] in
// core/plan.hpp) overlaps the compute in between.
void Lowerer::emit_side_op(OpId op, std::size_t base, bool rerun) {
  const OpInfo& info = op_[index(op)];
  auto& stream = program_->streams[static_cast<std::size_t>(program_stream(info.stream))];
  EventId issue = issue_event(op);
  EventId end = end_event(op);
  std::int32_t collective = info.collective;
  if (rerun) {
    issue = new_event(WaitCause::kIssue, kNoTensor);
    end = new_event(WaitCause::kStream, kNoTensor);
    if (collective >= 0) {
      Collective call = collectives_[at(collective)];
      call.sequence = next_sequence_[at(group_of_[at(collective)])]++;
      collective = static_cast<std::int32_t>(program_->collectives.size());
      program_->collectives.push_back(std::move(call));
    }
  }
  const auto run = static_cast<std::int32_t>(side_runs_.size());
  side_runs_.push_back({op, end, info.stream});
  const auto issued = emit({InstrKind::kRecord, op, kNoBuffer, value(issue), 0, 0, 0});
  stream.push_back({InstrKind::kWait, op, kNoBuffer, value(issue), 0, 0, 0});
  wait_for_streams(op, stream);
  const auto begin = static_cast<std::int32_t>(program_->operands.size());
  const auto count = static_cast<std::int32_t>(operand_stack_.size() - base);
  for (std::size_t k = base; k < operand_stack_.size(); ++k) {
    program_->operands.push_back(value(operand_stack_[k]));
    touch(operand_stack_[k], issued);
    side_use_[index(operand_stack_[k])] = run;
  }
  stream.push_back({collective >= 0 ? InstrKind::kCollective : InstrKind::kRun, op, kNoBuffer,
                    collective, begin, count, info.duration_ns});
  stream.push_back({InstrKind::kRecord, op, kNoBuffer, value(end), 0, 0, 0});
  operand_stack_.resize(base);
  if (!rerun) return;
  for (auto k = outputs_.begin[index(op)]; k < outputs_.begin[index(op) + 1]; ++k) {
    TensorState& out = state_[index(outputs_.items[at(k)])];
    out.in_event = end;  // its readers wait for the re-run (make_resident)
    out.awaiting_in = 1;
  }
}

// Before `op` runs on `stream`: a wait for the end of each op of another device stream that wrote
// one of its inputs or that it lists in `after` (what is issued earlier on the compute stream is
// covered by the issue mark).
void Lowerer::wait_for_streams(OpId op, std::vector<Instruction>& stream) {
  const std::int32_t own = op_[index(op)].stream;
  auto wait = [&](OpId other) {
    if (other == kNoOp || op_[index(other)].stream == own || !side(other)) return;
    stream.push_back({InstrKind::kWait, op, kNoBuffer, value(end_event(other)), 0, 0, 0});
  };
  for (auto k = inputs_.begin[index(op)]; k < inputs_.begin[index(op) + 1]; ++k)
    wait(tensor_[index(inputs_.items[at(k)])].producer);
  for (OpId other : w_.op(op).after) wait(other);
}

void Lowerer::issue_copy_out(TensorId t, OpId producer) {
  const auto ti = index(t);
  const BufferId b = state_[ti].loc;
  // A host-placed parameter or optimizer state has its slot already.
  if (state_[ti].slot == kNoHostSlot) {
    state_[ti].slot = host_slot_id(program_->host_slots.size());
    program_->host_slots.push_back({t, tensor_[ti].bytes, false});
  }
  const EventId written = new_event(WaitCause::kProducer, t);
  state_[ti].out_event = new_event(WaitCause::kSwapOut, t);
  emit({InstrKind::kRecord, producer, kNoBuffer, value(written), 0, 0, 0});
  auto& d2h = program_->streams[static_cast<std::size_t>(StreamId::kD2H)];
  d2h.push_back({InstrKind::kWait, producer, kNoBuffer, value(written), 0, 0, 0});
  if (side(producer))  // written on a side stream: the copy waits for that op too
    d2h.push_back({InstrKind::kWait, producer, kNoBuffer, value(end_event(producer)), 0, 0, 0});
  d2h.push_back({InstrKind::kCopyOut, producer, b, value(state_[ti].slot), 0, 0, 0});
  d2h.push_back({InstrKind::kRecord, producer, kNoBuffer, value(state_[ti].out_event), 0, 0, 0});
}

void Lowerer::issue_prefetch(TensorId t, OpId at_op) {
  const auto ti = index(t);
  MEMPLAN_CHECK(state_[ti].slot != kNoHostSlot, "a map is copied out before it is prefetched");
  release(t, at_op);  // the copy-in reads what the copy-out wrote
  const BufferId b = new_tensor_buffer(t, at_op);
  const EventId allocated = new_event(WaitCause::kAlloc, t);
  state_[ti].in_event = new_event(WaitCause::kSwapIn, t);
  touch(b, emit({InstrKind::kRecord, at_op, kNoBuffer, value(allocated), 0, 0, 0}));
  auto& h2d = program_->streams[static_cast<std::size_t>(StreamId::kH2D)];
  h2d.push_back({InstrKind::kWait, at_op, kNoBuffer, value(allocated), 0, 0, 0});
  h2d.push_back({InstrKind::kCopyIn, at_op, b, value(state_[ti].slot), 0, 0, 0});
  h2d.push_back({InstrKind::kRecord, at_op, kNoBuffer, value(state_[ti].in_event), 0, 0, 0});
  state_[ti].loc = b;
  state_[ti].awaiting_in = 1;
}

// After the map's last forward use: release the device copy the plan does not keep.
void Lowerer::forward_drop(TensorId t, OpId op) {
  const auto ti = index(t);
  const BufferId b = state_[ti].loc;
  MEMPLAN_CHECK(b != kNoBuffer, "a map is resident at its last forward use");
  const Decision& d = *state_[ti].decision;
  if (d.action == Action::kSwap) {
    state_[ti].releasing = b;
    if (d.release_before == kNoOp) release(t, op);
  } else if (d.action == Action::kEncode) {
    const Tensor& tensor = w_.tensor(t);
    const BufferId e = new_buffer({encoded_bytes(d.encoding, tensor), BufferRole::kEncoded,
                                   tensor.kind, t, kNoOp, d.encoding},
                                  op);
    const auto when = emit({InstrKind::kEncode, op, b, value(e), 0, 0, 0});
    touch(b, when);
    touch(e, when);
    state_[ti].encoded = e;
  }
  state_[ti].loc = kNoBuffer;
}

// A swapped map's device copy goes once its copy-out has read it (Note [Release point] in
// core/plan.hpp): compute waits for the copy-out here, and the free follows.
void Lowerer::release(TensorId t, OpId op) {
  TensorState& s = state_[index(t)];
  if (s.releasing == kNoBuffer) return;
  touch(s.releasing, emit({InstrKind::kWait, op, kNoBuffer, value(s.out_event), 0, 0, 0}));
  s.releasing = kNoBuffer;
}

// Note [Host placement] (core/plan.hpp), the plan's part: host slots of host-placed pre-existing
// tensors (and master copies of parameters a host update reads), and for every host-placed tensor
// the prefetch before each group of its uses (at the plan's point, or the default one) and the
// drop after the group's last use (a gradient's after its last use before the update).
void Lowerer::plan_host_placement(const Plan& plan) {
  entries_.clear();
  auto new_slot = [&](TensorId t) {
    state_[index(t)].slot = host_slot_id(program_->host_slots.size());
    program_->host_slots.push_back({t, tensor_[index(t)].bytes, true});
  };
  // (issued at, first use, tensor): at one op, the copy needed first is issued first.
  host_prefetches_.clear();
  for (TensorId t : plan.host_tensors) {
    state_[index(t)].host = 1;
    const auto begin = static_cast<std::size_t>(readers_.begin[index(t)]);
    const auto end = static_cast<std::size_t>(readers_.begin[index(t) + 1]);
    const std::span<const OpId> readers(readers_.items.data() + begin, end - begin);
    if (is_preexisting(tensor_[index(t)].kind)) {
      new_slot(t);
    } else {
      entries_.emplace_back(host_gradient_drop(t, readers, w_), t);
    }
    host_use_groups(t, readers, plan.host_update, w_, groups_);
    for (const HostUseGroup& g : groups_) {
      host_prefetches_.emplace_back(host_prefetch_point(plan, t, g), g.first_use, t);
      if (is_preexisting(tensor_[index(t)].kind)) entries_.emplace_back(g.last_use, t);
    }
  }
  std::sort(host_prefetches_.begin(), host_prefetches_.end());
  for (const auto& [when, first_use, t] : host_prefetches_) prefetches_.emplace_back(when, t);
  host_update_gradients_.clear();
  if (plan.host_update) {
    for (std::size_t i = 0; i < op_.size(); ++i) {
      if (op_[i].phase != Phase::kUpdate) continue;
      for (auto k = inputs_.begin[i]; k < inputs_.begin[i + 1]; ++k) {
        const TensorId x = inputs_.items[at(k)];
        const TensorState& s = state_[index(x)];
        if (s.host != 0 && tensor_[index(x)].kind == TensorKind::kGradient)
          host_update_gradients_.push_back(x);
        if (s.host == 0 && s.slot == kNoHostSlot && is_preexisting(tensor_[index(x)].kind))
          new_slot(x);  // a host copy: a parameter's master copy
      }
    }
    std::sort(host_update_gradients_.begin(), host_update_gradients_.end());
    host_update_gradients_.erase(
        std::unique(host_update_gradients_.begin(), host_update_gradients_.end()),
        host_update_gradients_.end());
  }
  host_drop_at_.build(w_.ops.size(), entries_);
}

// After the last use of a group of uses of a host-placed tensor: its device copy goes, once its
// slot holds it (a gradient's copy-out, or an update's write-back) — Note [Host placement].
void Lowerer::host_drop(TensorId t, OpId op) {
  const auto ti = index(t);
  const BufferId b = state_[ti].loc;
  if (b == kNoBuffer) return;
  const bool updated = op_[index(op)].phase == Phase::kUpdate && is_persistent(tensor_[ti].kind);
  if (updated) issue_copy_out(t, op);  // written in place by the update on the device
  if (updated || tensor_[ti].kind == TensorKind::kGradient)
    touch(b, emit({InstrKind::kWait, op, kNoBuffer, value(state_[ti].out_event), 0, 0, 0}));
  state_[ti].loc = kNoBuffer;
}

// An update op on the host stream over host slots (Note [Host placement]). The compute stream
// marks where it reaches the op: the device has read its parameters for the last time, and the
// host run waits for it (the step issues the update after backward); the first run waits for
// every gradient's copy-out too (the update starts once they are on the host). The run reads its
// inputs' slots and writes its outputs' (temporaries: a new slot, or the slot of the temporary it
// writes over); each parameter that stays on the device gets its updated master copy back after
// the run, and the compute stream waits for those copies after the last update op (the next
// step's reads of the parameters come after them: memplan.torch's end of step).
void Lowerer::emit_host_update(OpId op) {
  const EventId reached = new_event(WaitCause::kProducer, kNoTensor);
  emit({InstrKind::kRecord, op, kNoBuffer, value(reached), 0, 0, 0});
  auto& host = program_->streams[static_cast<std::size_t>(StreamId::kHost)];
  host.push_back({InstrKind::kWait, op, kNoBuffer, value(reached), 0, 0, 0});
  for (TensorId g : host_update_gradients_)
    host.push_back({InstrKind::kWait, op, kNoBuffer, value(state_[index(g)].out_event), 0, 0, 0});
  host_update_gradients_.clear();
  const auto begin = static_cast<std::int32_t>(program_->operands.size());
  for (auto k = inputs_.begin[index(op)]; k < inputs_.begin[index(op) + 1]; ++k) {
    const TensorState& s = state_[index(inputs_.items[at(k)])];
    MEMPLAN_CHECK(s.slot != kNoHostSlot, "a host update reads host copies (validate_plan)");
    program_->operands.push_back(value(s.slot));
  }
  for (auto k = outputs_.begin[index(op)]; k < outputs_.begin[index(op) + 1]; ++k) {
    const TensorId o = outputs_.items[at(k)];
    const TensorInfo& out = tensor_[index(o)];
    TensorState& s = state_[index(o)];
    if (out.in_place_of != kNoTensor) {
      s.slot = state_[index(out.in_place_of)].slot;
      MEMPLAN_CHECK(s.slot != kNoHostSlot, "a host update writes over its own temporaries");
    } else {
      s.slot = host_slot_id(program_->host_slots.size());
      program_->host_slots.push_back({o, out.bytes, false, true});
    }
    program_->operands.push_back(value(s.slot));
  }
  const auto count = static_cast<std::int32_t>(program_->operands.size()) - begin;
  host.push_back({InstrKind::kHostRun, op, kNoBuffer, -1, begin, count, 0});
  const EventId updated = new_event(WaitCause::kProducer, kNoTensor);
  host.push_back({InstrKind::kRecord, op, kNoBuffer, value(updated), 0, 0, 0});
  auto& h2d = program_->streams[static_cast<std::size_t>(StreamId::kH2D)];
  bool waited = false;
  for (auto k = inputs_.begin[index(op)]; k < inputs_.begin[index(op) + 1]; ++k) {
    const TensorId x = inputs_.items[at(k)];
    const TensorState& s = state_[index(x)];
    if (s.host != 0 || tensor_[index(x)].kind != TensorKind::kParameter) continue;
    if (!waited) {
      h2d.push_back({InstrKind::kWait, op, kNoBuffer, value(reached), 0, 0, 0});
      h2d.push_back({InstrKind::kWait, op, kNoBuffer, value(updated), 0, 0, 0});
      waited = true;
    }
    h2d.push_back({InstrKind::kCopyIn, op, s.loc, value(s.slot), 0, 0, 0});
  }
  if (op != last_update_op_) return;
  // The h2d engine runs in order: its end is the last master's copy (the compute stream has
  // waited for every prefetch before it already).
  const EventId copied = new_event(WaitCause::kStream, kNoTensor);
  h2d.push_back({InstrKind::kRecord, op, kNoBuffer, value(copied), 0, 0, 0});
  emit({InstrKind::kWait, op, kNoBuffer, value(copied), 0, 0, 0});
}

// Writes the compute stream: the body with each buffer's free right after its last reference.
// Counting sort of the buffers freed after body instruction `from` or later by the instruction
// they follow (buffer id order among those of one instruction): then the frees of instruction
// from + i are free_items_[free_begin_[i] .. free_begin_[i + 1]).
void Lowerer::sort_frees(std::size_t from) {
  const auto first = static_cast<std::int64_t>(from);
  const std::size_t n = body_.size() - from;
  free_begin_.assign(n + 1, 0);
  for (std::int64_t ref : last_ref_) {
    if (ref == kNeverFreed) continue;
    MEMPLAN_CHECK(ref >= 0, "every buffer is referenced");
    if (ref >= first) ++free_begin_[static_cast<std::size_t>(ref - first) + 1];
  }
  for (std::size_t i = 0; i < n; ++i) free_begin_[i + 1] += free_begin_[i];
  free_items_.resize(static_cast<std::size_t>(free_begin_.back()));
  std::vector<std::int32_t>& next = free_begin_;  // filled in place, then shifted back
  for (std::size_t b = 0; b < last_ref_.size(); ++b) {
    const std::int64_t ref = last_ref_[b];
    if (ref != kNeverFreed && ref >= first)
      free_items_[at(next[static_cast<std::size_t>(ref - first)]++)] = buffer_id(b);
  }
  for (std::size_t i = n; i > 0; --i) free_begin_[i] = free_begin_[i - 1];
  free_begin_[0] = 0;
}

void Lowerer::place_frees() {
  sort_frees(0);
  // Expand in place from the back: instruction i moves to i + (frees of the instructions before
  // it), its frees follow it; every target lies at or after the source, so nothing unread is
  // overwritten.
  const std::size_t n = body_.size();
  if (!side_ops_.empty()) {
    place_side_frees();
    return;
  }
  body_.resize(n + free_items_.size());
  for (std::size_t i = n; i-- > 0;) {
    const Instruction in = body_[i];
    const std::int32_t first = free_begin_[i];
    for (std::int32_t k = free_begin_[i + 1]; k-- > first;) {
      body_[i + static_cast<std::size_t>(k) + 1] = {
          InstrKind::kFree, in.op, free_items_[at(k)], -1, 0, 0, 0};
    }
    body_[i + static_cast<std::size_t>(first)] = in;
  }
  // Each op's first instruction moved by the frees placed before it.
  for (std::size_t& i : program_->host.dispatch_at) i += static_cast<std::size_t>(free_begin_[i]);
  body_.swap(program_->streams[static_cast<std::size_t>(StreamId::kCompute)]);
}

// place_frees for a workload with side streams. A buffer a side-stream op used may go only once
// that op has ended (what record_stream makes PyTorch's caching allocator do), and the compute
// stream does not wait for it: its free moves to the first point where the compute stream joins
// that op's stream at or after the op (a wait for the end of that op or a later one of its
// stream), or to the end of the step. Memory stays in one order, the compute stream never stalls
// for a free, and a buffer is held no longer than the step's own dependencies say it must be.
void Lowerer::place_side_frees() {
  std::vector<Instruction> out;
  out.reserve(body_.size() + 2 * free_items_.size());
  std::vector<std::size_t> moved(body_.size() + 1);
  std::vector<std::pair<std::int32_t, BufferId>> pending;  // (side run, buffer)
  // Per workload stream: the last side run the compute stream has joined (waited for), or -1.
  std::vector<std::int32_t> joined(stream_count_, -1);
  // Per event: the side run whose end it is, or -1.
  std::vector<std::int32_t> run_ending(program_->events.size(), -1);
  for (std::size_t r = 0; r < side_runs_.size(); ++r)
    run_ending[index(side_runs_[r].end)] = static_cast<std::int32_t>(r);
  auto stream_of = [&](std::int32_t run) {
    return static_cast<std::size_t>(side_runs_[at(run)].stream);
  };
  for (std::size_t i = 0; i < body_.size(); ++i) {
    moved[i] = out.size();
    const Instruction& in = body_[i];
    out.push_back(in);
    if (in.kind == InstrKind::kWait && run_ending[index(in.event())] >= 0) {
      // A join: frees of buffers used by this run or an earlier run of its stream go here.
      const std::int32_t upto = run_ending[index(in.event())];
      const std::size_t stream = stream_of(upto);
      joined[stream] = std::max(joined[stream], upto);
      std::erase_if(pending, [&](const std::pair<std::int32_t, BufferId>& p) {
        if (p.first > upto || stream_of(p.first) != stream) return false;
        out.push_back({InstrKind::kFree, in.op, p.second, -1, 0, 0, 0});
        return true;
      });
    }
    for (std::int32_t k = free_begin_[i]; k < free_begin_[i + 1]; ++k) {
      const BufferId b = free_items_[at(k)];
      const std::int32_t used = side_use_[index(b)];
      if (used >= 0 && used > joined[stream_of(used)]) {
        pending.emplace_back(used, b);  // its side run may still be going: wait for a join
      } else {
        out.push_back({InstrKind::kFree, in.op, b, -1, 0, 0, 0});
      }
    }
  }
  moved[body_.size()] = out.size();
  for (const auto& [run, b] : pending) {  // never joined: freed at the end of the step
    const SideRun& r = side_runs_[at(run)];
    out.push_back({InstrKind::kWait, r.op, kNoBuffer, value(r.end), 0, 0, 0});
    out.push_back({InstrKind::kFree, r.op, b, -1, 0, 0, 0});
  }
  for (std::size_t& i : program_->host.dispatch_at) i = moved[i];
  body_.swap(out);
  body_.swap(program_->streams[static_cast<std::size_t>(StreamId::kCompute)]);
}

Program lower(const Workload& workload, const Plan& plan) {
  Lowerer lowerer(workload);
  Program program;
  lowerer.lower(plan, program);
  return program;
}

std::vector<RegeneratedFree> regenerated_frees(const Workload& workload, const Program& program) {
  struct Use {
    bool written = false;
    bool regenerated = false;     // a re-run wrote it first, into no temporary second copy
    bool run = false;             // a run of the step reads or writes it
    TensorId tensor = kNoTensor;  // the last version written into it
    OpId rerun = kNoOp;
    std::int32_t occurrence = 0;
    std::size_t last = 0;         // the instruction, for the order
    std::vector<TensorId> holds;  // the versions written into it
  };
  std::vector<Use> uses(program.buffers.size());
  // Per tensor, the buffer holding it until that buffer is freed: a re-run that writes a tensor
  // held elsewhere writes a temporary second copy (Lowerer::finish_op), which the carrying out
  // does not keep either.
  std::vector<BufferId> holder(workload.tensors.size(), kNoBuffer);
  std::vector<std::int32_t> reruns(workload.ops.size(), 0);
  const auto& compute = program.streams[static_cast<std::size_t>(StreamId::kCompute)];
  for (std::size_t k = 0; k < compute.size(); ++k) {
    const Instruction& in = compute[k];
    if (in.kind == InstrKind::kFree) {
      for (TensorId t : uses[index(in.buffer)].holds) {
        if (holder[index(t)] == in.buffer) holder[index(t)] = kNoBuffer;
      }
      continue;
    }
    if (in.kind != InstrKind::kRun && in.kind != InstrKind::kRecompute) continue;
    const Op& op = workload.op(in.op);
    const bool rerun = in.kind == InstrKind::kRecompute;
    const std::int32_t occurrence = rerun ? reruns[index(in.op)]++ : 0;
    const auto inputs = static_cast<std::int32_t>(op.inputs.size());
    const auto outputs = static_cast<std::int32_t>(op.outputs.size());
    for (std::int32_t j = 0; j < in.operand_count && j < inputs + outputs; ++j) {
      const BufferId b = program.operand_buffer(in, j);
      if (b == kNoBuffer) continue;
      Use& u = uses[index(b)];
      if (j >= inputs) {
        const TensorId t = op.outputs[static_cast<std::size_t>(j - inputs)];
        const bool temporary = holder[index(t)] != kNoBuffer && holder[index(t)] != b;
        if (!u.written) u.regenerated = rerun && !temporary;
        u.written = true;
        u.tensor = t;
        if (!temporary) {
          holder[index(t)] = b;
          u.holds.push_back(t);
        }
      }
      if (!rerun) u.run = true;
      u.rerun = in.op;
      u.occurrence = occurrence;
      u.last = k;
    }
  }
  std::vector<std::pair<std::size_t, RegeneratedFree>> found;
  for (const Use& u : uses) {
    if (u.regenerated && !u.run && u.tensor != kNoTensor)
      found.push_back({u.last, {u.tensor, u.rerun, u.occurrence}});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RegeneratedFree> out;
  out.reserve(found.size());
  for (const auto& f : found) out.push_back(f.second);
  return out;
}

}  // namespace memplan::sim
