#include "sim/lowering.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <span>

#include "sim/check.hpp"
#include "sim/liveness.hpp"

namespace memplan::sim {

namespace {
constexpr std::int64_t kNeverFreed = std::numeric_limits<std::int64_t>::max();
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

namespace {
/// The workload's host side as the engine reads it (Note [Host stream] in sim/engine.hpp): active
/// when some op records one or the workload knows its launch cost.
HostProgram host_program(const Workload& w) {
  HostProgram host;
  host.tail_ns = w.host_tail_ns;
  const bool recorded =
      std::any_of(w.ops.begin(), w.ops.end(), [](const Op& op) { return op.host.has_value(); });
  if (!recorded && !w.launch_ns) return host;
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
  std::vector<std::pair<OpId, TensorId>> inputs;
  std::vector<std::pair<OpId, TensorId>> outputs;
  for (const Op& op : w_.ops) {
    op_.push_back({op.duration_ns, op.workspace_bytes, op.phase});
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
    op_compute_ns_ += op.duration_ns;
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
  lower_keeping(plan, out, nullptr);
}

void Lowerer::lower(const Plan& plan, Program& out, Checkpoint& checkpoint) {
  checkpoint.at_ = kNoOp;
  const bool host = !plan.host_tensors.empty() || plan.host_update;
  lower_keeping(plan, out, host || backward_start_ == kNoOp ? nullptr : &checkpoint);
}

void Lowerer::lower_keeping(const Plan& plan, Program& out, Checkpoint* checkpoint) {
  rewind_.generation = 0;  // the body and maybe the Program are this plan's now
  program_ = &out;
  start_program(plan);
  plan_drop_points(plan);
  place_preexisting();
  lower_ops(plan, 0, checkpoint);
  place_frees();
  if (checkpoint != nullptr) keep_placed(*checkpoint);
  program_ = nullptr;
}

// Lowers the ops from `begin` on; keeps the state before the backward pass in `checkpoint`.
void Lowerer::lower_ops(const Plan& plan, std::size_t begin, Checkpoint* checkpoint) {
  for (std::size_t i = begin; i < op_.size(); ++i) {
    if (checkpoint != nullptr && op_id(i) == backward_start_) keep_state(plan, *checkpoint);
    lower_op(plan, op_id(i));
  }
}

// The lowering's state before the first backward op.
void Lowerer::keep_state(const Plan& plan, Checkpoint& c) const {
  static std::atomic<std::uint64_t> generations{0};
  c.at_ = backward_start_;
  c.generation_ = ++generations;
  c.decisions_ = plan.decisions;
  c.algorithms_ = plan.algorithms;
  c.state_ = state_;
  c.last_ref_ = last_ref_;
  c.body_ = body_;
  Program& p = c.program_;
  p.operands = program_->operands;
  p.buffers = program_->buffers;
  p.events = program_->events;
  p.host_slots = program_->host_slots;
  for (std::size_t s = 0; s < kStreamCount; ++s) {
    if (s != static_cast<std::size_t>(StreamId::kCompute)) p.streams[s] = program_->streams[s];
  }
  p.host.dispatch_at = program_->host.dispatch_at;
}

// Once the frees are placed: the compute stream before the checkpoint's op and which buffers made
// there are freed there, what resume() reuses when its plan frees the same ones
// (place_frees_after).
void Lowerer::keep_placed(Checkpoint& c) const {
  const auto p = static_cast<std::int64_t>(c.body_.size());
  c.freed_before_.resize(c.last_ref_.size());
  std::size_t frees = 0;
  for (std::size_t b = 0; b < c.freed_before_.size(); ++b) {
    c.freed_before_[b] = last_ref_[b] != kNeverFreed && last_ref_[b] < p ? 1 : 0;
    frees += c.freed_before_[b];
  }
  const auto& compute = program_->stream(StreamId::kCompute);
  c.placed_.assign(compute.begin(),
                   compute.begin() + static_cast<std::ptrdiff_t>(c.body_.size() + frees));
  c.placed_dispatch_at_ = program_->host.dispatch_at;
}

// Note [Resuming a lowering]
// Ops are lowered in issue order, so the lowering of a plan before op `at` reads only what the
// plan decides for those ops: a map's copy-out after its producer (swap), its drop after its last
// forward use (and what the action does there: release, encode), a release or prefetch point
// before `at`. Two plans that agree on that for every map, and on algorithms and host placement,
// lower the ops before `at` alike, so a lowering of the second can start from the first's state
// at `at` (the Checkpoint) and lower only the rest: the same Program (kExact). The checkpoint is
// taken where the backward pass starts, the first op that is not a forward op; a search that
// changes how maps come back for the backward pass (swap, recompute, prefetch points) resumes
// there and lowers about half of the step.
// One change that the forward pass sees is allowed as well (kEquivalent): a map the checkpoint's
// plan swaps, released after its last forward use and prefetched at or after `at`, that the plan
// recomputes. Its forward pass differs from a recomputed map's only by its copy-out: a record on
// the compute stream after the producer, the copy on the device-to-host stream between a wait and
// a record, an event pair, a host slot, and the compute stream's wait for the copy before the
// map's free. resume() forgets the copy-out: it takes the copy off the device-to-host stream,
// turns the wait into a record of the same event and makes the producer's event one whose record
// launches nothing on the host (records that take no time and that nothing waits for, so no
// position in the compute stream moves), and clears the map's host copy from its state, which is
// then a recomputed map's. The Program runs as lower()'s does: the same
// copies on the link, the same allocations at the same times, the same iteration time, stalls and
// peaks. The map's free comes at the same point between two allocations, but not always at the
// same moment: after the op's other frees and waits (another swapped map's wait for its copy-out)
// rather than right after its last forward use, so the memory curve between two allocations can
// differ (no allocation comes between: a plan with encodes, which allocate there, is not resumed
// this way). The instruction count and the unused events and host slot differ too.
// tests/property/random_dag_test.cpp compares both kinds with lower() on random graphs and plans.
bool Lowerer::prefix_reads_same(const Decision& a, const Decision& b, OpId start) const {
  const MapPoints& map = map_points_[at(map_of_[index(a.tensor)])];
  if (tensor_[index(a.tensor)].producer >= start) return true;  // nothing of it before `at`
  const bool dropped = map.last_forward_use < start;
  auto prefetched_before = [&](const Decision& d) {
    if (d.action != Action::kSwap) return kNoOp;
    const OpId p = d.prefetch_before != kNoOp ? d.prefetch_before : map.default_prefetch;
    return p < start ? p : kNoOp;
  };
  // Where a swapped map's device copy is released before `start`: after its last forward use,
  // or before its release point (Note [Release point]); (false, kNoOp) when not before `start`.
  auto released_before = [&](const Decision& d) {
    if (d.action != Action::kSwap || !dropped) return std::pair(false, kNoOp);
    const bool at_point = d.release_before != kNoOp;
    const OpId r = at_point ? d.release_before : map.last_forward_use;
    return r < start ? std::pair(at_point, r) : std::pair(false, kNoOp);
  };
  const bool swapped = a.action == Action::kSwap;  // copied out after its producer
  if (swapped != (b.action == Action::kSwap)) return false;
  if (dropped && (a.action != b.action || a.encoding != b.encoding)) return false;
  return prefetched_before(a) == prefetched_before(b) && released_before(a) == released_before(b);
}

// The copy-outs of the maps the checkpoint's plan swaps and `plan` recomputes (Note [Resuming a
// lowering], kEquivalent): off the device-to-host stream, the compute stream's wait for each turned
// into a record of the same event (which nothing waits for now), and gone from the maps' state.
void Lowerer::forget_copy_outs(const Plan& plan, const Checkpoint& from) {
  forgotten_.clear();
  rewind_.events_changed.clear();
  rewind_.d2h_changed = false;
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    if (from.decisions_[i].action != Action::kSwap ||
        plan.decisions[i].action != Action::kRecompute)
      continue;
    if (forgotten_.empty()) forgotten_.assign(program_->events.size(), 0);
    TensorState& s = state_[index(plan.decisions[i].tensor)];
    // issue_copy_out: the event the producer records, then the one the copy-out records.
    forgotten_[index(s.out_event)] = 1;
    forgotten_[index(s.out_event) - 1] = 1;
    s.slot = kNoHostSlot;
    s.out_event = kNoEvent;
  }
  if (forgotten_.empty()) return;
  // On the device-to-host stream a copy-out sits between the wait for its producer's event and
  // the record of its own.
  auto& d2h = program_->streams[static_cast<std::size_t>(StreamId::kD2H)];
  std::size_t kept = 0;
  bool forgotten = false;
  for (const Instruction& in : d2h) {
    if (in.kind != InstrKind::kCopyOut) forgotten = forgotten_[index(in.event())] != 0;
    if (!forgotten) d2h[kept++] = in;
  }
  d2h.resize(kept);
  // The producer's record stays: as the event of a copy-out it would have the host launch the
  // copy (Note [Host stream] in sim/engine.hpp); as a swap-out event it launches nothing.
  for (std::size_t e = 0; e < forgotten_.size(); ++e) {
    if (forgotten_[e] == 0) continue;
    program_->events[e].cause = WaitCause::kSwapOut;
    rewind_.events_changed.push_back(e);
  }
  rewind_.d2h_changed = true;
}

// The compute stream's waits for forgotten copy-outs become records of the same event (events
// made after the checkpoint are none of them).
void Lowerer::forget_waits(std::vector<Instruction>& stream,
                           std::vector<std::size_t>* changed) const {
  if (changed != nullptr) changed->clear();
  if (forgotten_.empty()) return;
  for (std::size_t i = 0; i < stream.size(); ++i) {
    Instruction& in = stream[i];
    if (in.kind == InstrKind::kWait && index(in.event()) < forgotten_.size() &&
        forgotten_[index(in.event())] != 0) {
      in.kind = InstrKind::kRecord;
      if (changed != nullptr) changed->push_back(i);
    }
  }
}

Lowerer::Resumable Lowerer::resumable(const Plan& plan, const Checkpoint& from) const {
  if (from.empty() || !plan.host_tensors.empty() || plan.host_update ||
      plan.algorithms != from.algorithms_ || plan.decisions.size() != from.decisions_.size())
    return Resumable::kNo;
  Resumable how = Resumable::kExact;
  bool encodes = false;
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    const Decision& a = from.decisions_[i];
    const Decision& b = plan.decisions[i];
    if (a.tensor != b.tensor) return Resumable::kNo;
    encodes = encodes || a.action == Action::kEncode;
    if (a == b || prefix_reads_same(a, b, from.at_)) continue;
    const MapPoints& map = map_points_[at(map_of_[index(a.tensor)])];
    const bool copy_out_forgotten =
        a.action == Action::kSwap && b.action == Action::kRecompute && a.release_before == kNoOp &&
        map.last_forward_use < from.at_ &&
        (a.prefetch_before != kNoOp ? a.prefetch_before : map.default_prefetch) >= from.at_;
    if (!copy_out_forgotten) return Resumable::kNo;
    how = Resumable::kEquivalent;
  }
  // An encode after the same op could allocate between the recomputed map's free and the wait
  // that holds it in the checkpoint's plan.
  return how == Resumable::kEquivalent && encodes ? Resumable::kNo : how;
}

Lowerer::Resumption Lowerer::resume(const Plan& plan, const Checkpoint& from, Program& out) {
  const Resumable how = resumable(plan, from);
  if (how == Resumable::kNo) return {};
  program_ = &out;
  const bool rewound = rewind(from);
  if (rewound) {
    ++rewinds_;
    out.action_counts = {};
  } else {
    start_program(plan);
    const Program& p = from.program_;
    out.operands = p.operands;
    out.buffers = p.buffers;
    out.events = p.events;
    out.host_slots = p.host_slots;
    for (std::size_t s = 0; s < kStreamCount; ++s) {
      if (s != static_cast<std::size_t>(StreamId::kCompute)) out.streams[s] = p.streams[s];
    }
    out.host.dispatch_at = p.host.dispatch_at;
    body_ = from.body_;
  }
  state_ = from.state_;
  last_ref_ = from.last_ref_;
  plan_drop_points(plan);  // points the state at this plan's decisions
  forget_copy_outs(plan, from);
  lower_ops(plan, static_cast<std::size_t>(value(from.at_)), nullptr);
  const bool same_prefix = place_frees_after(from, rewound);
  if (same_prefix) {
    rewind_.generation = from.generation_;
    rewind_.program = &out;
    for (std::size_t s = 0; s < kStreamCount; ++s) rewind_.stream_sizes[s] = out.streams[s].size();
    rewind_.operands = out.operands.size();
    rewind_.buffers = out.buffers.size();
    rewind_.events = out.events.size();
    rewind_.host_slots = out.host_slots.size();
    rewind_.body = body_.size();
  } else {
    rewind_.generation = 0;
    forget_waits(body_, nullptr);
    place_frees();
  }
  program_ = nullptr;
  return {how, same_prefix};
}

// Note [Rewinding a resumed lowering]
// A search resumes many plans from one checkpoint into one Program (Evaluator::resume). Copying
// the checkpoint's part of the Program and body into it each time moves megabytes (ResNet-1517:
// 1 ms a resume, more than half as long as lowering the backward pass). Yet a resume whose compute
// stream before the checkpoint's op is the checkpoint's (place_frees_after) leaves that part as it
// found it, but for what it appends and three changes that forget_copy_outs and place_frees_after
// record in rewind_: the copy-outs taken off the device-to-host stream, the events made swap-out
// events and the compute stream's waits turned into records. So the next resume from the same
// checkpoint (its generation: every state kept gets a new one) into the same Program (its vectors
// the sizes that resume left) truncates each vector to the checkpoint's size and undoes those
// changes. The state and last references are copied as before: a lowering changes them anywhere.
// Any lower() on the Lowerer, and a resume that places frees another way, leave nothing to rewind.
// tests/property/random_dag_test.cpp resumes plans one after another into one Program, with full
// lowerings between some of them, and compares each with lower()'s.
bool Lowerer::rewind(const Checkpoint& from) {
  Program& out = *program_;
  Rewind& r = rewind_;
  if (r.generation != from.generation_ || r.program != &out || out.operands.size() != r.operands ||
      out.buffers.size() != r.buffers || out.events.size() != r.events ||
      out.host_slots.size() != r.host_slots || body_.size() != r.body)
    return false;
  for (std::size_t s = 0; s < kStreamCount; ++s) {
    if (out.streams[s].size() != r.stream_sizes[s]) return false;
  }
  const Program& p = from.program_;
  out.operands.resize(p.operands.size());
  out.buffers.resize(p.buffers.size());
  out.events.resize(p.events.size());
  for (std::size_t e : r.events_changed) out.events[e].cause = p.events[e].cause;
  out.host_slots.resize(p.host_slots.size());
  for (std::size_t s = 0; s < kStreamCount; ++s) {
    if (s == static_cast<std::size_t>(StreamId::kCompute)) continue;
    if (s == static_cast<std::size_t>(StreamId::kD2H) && r.d2h_changed) {
      out.streams[s] = p.streams[s];
    } else {
      out.streams[s].resize(p.streams[s].size());
    }
  }
  auto& compute = out.streams[static_cast<std::size_t>(StreamId::kCompute)];
  compute.resize(from.placed_.size());
  for (std::size_t i : r.waits) compute[i].kind = InstrKind::kWait;
  body_.resize(from.body_.size());
  // Where each op starts in the body (place_frees reads it when the frees differ this time).
  out.host.dispatch_at = p.host.dispatch_at;
  return true;
}

// place_frees for a resumed lowering that frees, before the checkpoint's op, the very buffers the
// checkpoint's plan freed there (a buffer made there is freed there unless a later instruction
// reads it): that part of the compute stream is the checkpoint's, then the rest of the body with
// its frees. Returns false, placing nothing, when the frees there differ.
bool Lowerer::place_frees_after(const Checkpoint& from, bool rewound) {
  const auto p = static_cast<std::int64_t>(from.body_.size());
  for (std::size_t b = 0; b < from.freed_before_.size(); ++b) {
    const bool freed = last_ref_[b] != kNeverFreed && last_ref_[b] < p;
    if (freed != (from.freed_before_[b] != 0)) return false;
  }
  const std::size_t n = body_.size() - from.body_.size();
  sort_frees(from.body_.size());
  auto& out = program_->streams[static_cast<std::size_t>(StreamId::kCompute)];
  if (!rewound) out.assign(from.placed_.begin(), from.placed_.end());  // else it holds them
  forget_waits(out, &rewind_.waits);
  const std::size_t base = out.size();
  out.reserve(base + n + free_items_.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Instruction& in = body_[from.body_.size() + i];
    out.push_back(in);
    for (auto k = free_begin_[i]; k < free_begin_[i + 1]; ++k)
      out.push_back({InstrKind::kFree, in.op, free_items_[at(k)], -1, 0, 0, 0});
  }
  auto& dispatch = program_->host.dispatch_at;
  for (std::size_t i = 0; i < dispatch.size(); ++i) {
    if (i < static_cast<std::size_t>(value(from.at_))) {
      dispatch[i] = from.placed_dispatch_at_[i];
    } else {
      const std::size_t s = dispatch[i] - from.body_.size();
      dispatch[i] = base + s + static_cast<std::size_t>(free_begin_[s]);
    }
  }
  return true;
}

// Clears the program (keeping its capacity) and the per-plan scratch; charges the compute time of
// the plan's algorithm choices and of an update it moves to the host.
void Lowerer::start_program(const Plan& plan) {
  Program& out = *program_;
  for (auto& stream : out.streams) stream.clear();
  out.operands.clear();
  out.buffers.clear();
  out.events.clear();
  out.host_slots.clear();
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
      if (op.phase == Phase::kUpdate) out.op_compute_ns -= op.duration_ns;
    }
  }
  state_.assign(w_.tensors.size(), TensorState{});
  // The body is built in the compute stream's own storage and expanded in place by place_frees.
  body_.swap(out.streams[static_cast<std::size_t>(StreamId::kCompute)]);
  body_.clear();
  last_ref_.clear();
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
    if (state_[index(t)].loc == kNoBuffer) issue_prefetch(t, op);
  }
  regenerated_.clear();
  if (plan.host_update && op_[i].phase == Phase::kUpdate) {
    emit_host_update(op);
  } else {
    emit_op(op, InstrKind::kRun);
  }
  if (op_[i].phase == Phase::kBackward) forget_per_use();
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

std::int64_t Lowerer::emit(const Instruction& in) {
  body_.push_back(in);
  return static_cast<std::int64_t>(body_.size()) - 1;
}

void Lowerer::touch(BufferId b, std::int64_t when) {
  auto& ref = last_ref_[index(b)];
  if (ref != kNeverFreed) ref = std::max(ref, when);
}

BufferId Lowerer::new_buffer(const Buffer& buffer, OpId for_op) {
  const BufferId b = buffer_id(program_->buffers.size());
  program_->buffers.push_back(buffer);
  last_ref_.push_back(emit({InstrKind::kAlloc, for_op, b, -1, 0, 0, 0}));
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

// Memory-centric recomputation: when a backward op needed a per-use map regenerated, that map and
// the intermediates regenerated to make it are forgotten once the op has read them (their buffers
// are freed after this op), so the next use regenerates them from the checkpoint again. Maps the
// plan recomputes once (per_use false) that were regenerated on the way stay resident.
void Lowerer::forget_per_use() {
  const bool any = std::any_of(regenerated_.begin(), regenerated_.end(), [&](TensorId t) {
    const Decision* d = state_[index(t)].decision;
    return d != nullptr && d->per_use;
  });
  if (!any) return;
  for (TensorId t : regenerated_) {
    const Decision* d = state_[index(t)].decision;
    if (d == nullptr || d->per_use) state_[index(t)].loc = kNoBuffer;
  }
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
  const auto begin = static_cast<std::int32_t>(program_->operands.size());
  const auto count = static_cast<std::int32_t>(operand_stack_.size() - base);
  for (std::size_t k = base; k < operand_stack_.size(); ++k)
    program_->operands.push_back(value(operand_stack_[k]));
  const auto when = emit({kind, op, kNoBuffer, -1, begin, count, duration});
  for (std::size_t k = base; k < operand_stack_.size(); ++k) touch(operand_stack_[k], when);
  operand_stack_.resize(base);
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
// sim/plan.hpp): compute waits for the copy-out here, and the free follows.
void Lowerer::release(TensorId t, OpId op) {
  TensorState& s = state_[index(t)];
  if (s.releasing == kNoBuffer) return;
  touch(s.releasing, emit({InstrKind::kWait, op, kNoBuffer, value(s.out_event), 0, 0, 0}));
  s.releasing = kNoBuffer;
}

// Note [Host placement] (sim/plan.hpp), the plan's part: host slots of host-placed pre-existing
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
  auto chosen = plan.host_prefetches.begin();  // ascending (tensor, first use), like the loops
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
      OpId when = g.default_prefetch;
      while (chosen != plan.host_prefetches.end() &&
             std::pair(chosen->tensor, chosen->first_use) < std::pair(t, g.first_use))
        ++chosen;
      if (chosen != plan.host_prefetches.end() && chosen->tensor == t &&
          chosen->first_use == g.first_use)
        when = chosen->prefetch_before;
      host_prefetches_.emplace_back(when, g.first_use, t);
      if (is_preexisting(tensor_[index(t)].kind)) entries_.emplace_back(g.last_use, t);
    }
  }
  std::sort(host_prefetches_.begin(), host_prefetches_.end());
  for (const auto& [when, first_use, t] : host_prefetches_) prefetches_.emplace_back(when, t);
  if (plan.host_update) {
    for (std::size_t i = 0; i < op_.size(); ++i) {
      if (op_[i].phase != Phase::kUpdate) continue;
      for (auto k = inputs_.begin[i]; k < inputs_.begin[i + 1]; ++k) {
        const TensorId x = inputs_.items[at(k)];
        if (state_[index(x)].host == 0 && state_[index(x)].slot == kNoHostSlot)
          new_slot(x);  // a master copy
      }
    }
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
// marks where the device has read its parameters for the last time; each parameter that stays on
// the device gets its updated master copy back after the update.
void Lowerer::emit_host_update(OpId op) {
  const EventId reads_done = new_event(WaitCause::kProducer, kNoTensor);
  emit({InstrKind::kRecord, op, kNoBuffer, value(reads_done), 0, 0, 0});
  auto& host = program_->streams[static_cast<std::size_t>(StreamId::kHost)];
  const auto begin = static_cast<std::int32_t>(program_->operands.size());
  for (auto k = inputs_.begin[index(op)]; k < inputs_.begin[index(op) + 1]; ++k) {
    const TensorId x = inputs_.items[at(k)];
    const TensorState& s = state_[index(x)];
    MEMPLAN_CHECK(s.slot != kNoHostSlot, "a host update reads host copies (validate_plan)");
    if (tensor_[index(x)].kind == TensorKind::kGradient)
      host.push_back({InstrKind::kWait, op, kNoBuffer, value(s.out_event), 0, 0, 0});
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
      h2d.push_back({InstrKind::kWait, op, kNoBuffer, value(reads_done), 0, 0, 0});
      h2d.push_back({InstrKind::kWait, op, kNoBuffer, value(updated), 0, 0, 0});
      waited = true;
    }
    h2d.push_back({InstrKind::kCopyIn, op, s.loc, value(s.slot), 0, 0, 0});
  }
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

Program lower(const Workload& workload, const Plan& plan) {
  Lowerer lowerer(workload);
  Program program;
  lowerer.lower(plan, program);
  return program;
}

}  // namespace memplan::sim
