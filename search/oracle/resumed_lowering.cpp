#include "search/oracle/resumed_lowering.hpp"

#include <atomic>
#include <utility>

namespace memplan::search {

using sim::Action;
using sim::Decision;
using sim::InstrKind;
using sim::Instruction;
using sim::kFixedStreamCount;
using sim::kNoEvent;
using sim::kNoHostSlot;
using sim::kNoOp;
using sim::OpId;
using sim::Plan;
using sim::Program;
using sim::StreamId;
using sim::WaitCause;

void ResumableLowerer::lower(const Plan& plan, Program& out, Checkpoint& checkpoint) {
  checkpoint.at_ = kNoOp;
  const bool host = !plan.host_tensors.empty() || plan.host_update;
  // A workload with side streams is never resumed (resumable()): no checkpoint to keep.
  if (host || backward_start() == kNoOp || has_side_streams()) {
    lower(plan, out);
    return;
  }
  const auto at = static_cast<std::size_t>(value(backward_start()));
  start(plan, out);
  lower_ops(plan, 0, at);
  keep_state(plan, checkpoint);
  lower_ops(plan, at, op_count());
  finish();
  keep_placed(checkpoint, out);
}

// The lowering's state before the first backward op.
void ResumableLowerer::keep_state(const Plan& plan, Checkpoint& c) const {
  static std::atomic<std::uint64_t> generations{0};
  c.at_ = backward_start();
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
  for (std::size_t s = 0; s < kFixedStreamCount; ++s) {
    if (s != static_cast<std::size_t>(StreamId::kCompute)) p.streams[s] = program_->streams[s];
  }
  p.host.dispatch_at = program_->host.dispatch_at;
}

// Once the frees are placed: the compute stream before the checkpoint's op and which buffers made
// there are freed there, what resume() reuses when its plan frees the same ones
// (place_frees_after).
void ResumableLowerer::keep_placed(Checkpoint& c, const Program& out) const {
  const auto p = static_cast<std::int64_t>(c.body_.size());
  c.freed_before_.resize(c.last_ref_.size());
  std::size_t frees = 0;
  for (std::size_t b = 0; b < c.freed_before_.size(); ++b) {
    c.freed_before_[b] = last_ref_[b] != kNeverFreed && last_ref_[b] < p ? 1 : 0;
    frees += c.freed_before_[b];
  }
  const auto& compute = out.stream(StreamId::kCompute);
  c.placed_.assign(compute.begin(),
                   compute.begin() + static_cast<std::ptrdiff_t>(c.body_.size() + frees));
  c.placed_dispatch_at_ = out.host.dispatch_at;
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
// there and lowers about half of the step. With gradient accumulation (forward and backward passes
// alternating, one pair per micro-batch) that is where the first micro-batch's backward pass
// starts: a later micro-batch's maps are made after it, so every decision about them acts after it
// (prefix_reads_same: nothing of them before `at`), and the search's changes to any micro-batch's
// way back resume there (tests/search/oracle/accumulation_test.cpp).
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
bool ResumableLowerer::prefix_reads_same(const Decision& a, const Decision& b, OpId start) const {
  const MapPoints& map = map_points(a.tensor);
  if (producer(a.tensor) >= start) return true;  // nothing of it before `at`
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
void ResumableLowerer::forget_copy_outs(const Plan& plan, const Checkpoint& from) {
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
void ResumableLowerer::forget_waits(std::vector<Instruction>& stream,
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

ResumableLowerer::Resumable ResumableLowerer::resumable(const Plan& plan,
                                                        const Checkpoint& from) const {
  if (from.empty()) return Resumable::kNo;
  return resumable(plan, from.decisions_, from.algorithms_);
}

ResumableLowerer::Resumable ResumableLowerer::resumable(const Plan& plan, const Plan& base) const {
  if (!base.host_tensors.empty() || base.host_update || backward_start() == kNoOp)
    return Resumable::kNo;  // lower() keeps no checkpoint of `base`
  return resumable(plan, base.decisions, base.algorithms);
}

ResumableLowerer::Resumable ResumableLowerer::resumable(
    const Plan& plan, const std::vector<Decision>& decisions,
    const std::vector<sim::AlgorithmChoice>& algorithms) const {
  if (!plan.host_tensors.empty() || plan.host_update || plan.algorithms != algorithms ||
      plan.decisions.size() != decisions.size())
    return Resumable::kNo;
  const OpId at = backward_start();
  Resumable how = Resumable::kExact;
  bool encodes = false;
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    const Decision& a = decisions[i];
    const Decision& b = plan.decisions[i];
    if (a.tensor != b.tensor) return Resumable::kNo;
    encodes = encodes || a.action == Action::kEncode;
    if (a == b || prefix_reads_same(a, b, at)) continue;
    const MapPoints& map = map_points(a.tensor);
    const bool copy_out_forgotten =
        a.action == Action::kSwap && b.action == Action::kRecompute && a.release_before == kNoOp &&
        map.last_forward_use < at &&
        (a.prefetch_before != kNoOp ? a.prefetch_before : map.default_prefetch) >= at;
    if (!copy_out_forgotten) return Resumable::kNo;
    how = Resumable::kEquivalent;
  }
  // An encode after the same op could allocate between the recomputed map's free and the wait
  // that holds it in the checkpoint's plan.
  return how == Resumable::kEquivalent && encodes ? Resumable::kNo : how;
}

ResumableLowerer::Resumption ResumableLowerer::resume(const Plan& plan, const Checkpoint& from,
                                                      Program& out) {
  const Resumable how = resumable(plan, from);
  if (how == Resumable::kNo) return {};
  program_ = &out;
  const bool rewound = rewind(from);
  if (rewound) {
    ++rewinds_;
    out.action_counts = {};
  } else {
    restore(plan, from, out);
  }
  state_ = from.state_;
  last_ref_ = from.last_ref_;
  plan_drop_points(plan);  // points the state at this plan's decisions
  forget_copy_outs(plan, from);
  lower_ops(plan, static_cast<std::size_t>(value(from.at_)), op_count());
  const bool same_prefix = place_frees_after(from, rewound);
  if (same_prefix) {
    keep_rewind(from, out);
  } else {
    rewind_.generation = 0;
    forget_waits(body_, nullptr);
    place_frees();
  }
  program_ = nullptr;
  return {how, same_prefix};
}

// The checkpoint's part of the Program and body, copied into `out` (cleared for `plan` first).
void ResumableLowerer::restore(const Plan& plan, const Checkpoint& from, Program& out) {
  start_program(plan);
  const Program& p = from.program_;
  out.operands = p.operands;
  out.buffers = p.buffers;
  out.events = p.events;
  out.host_slots = p.host_slots;
  for (std::size_t s = 0; s < kFixedStreamCount; ++s) {
    if (s != static_cast<std::size_t>(StreamId::kCompute)) out.streams[s] = p.streams[s];
  }
  out.host.dispatch_at = p.host.dispatch_at;
  body_ = from.body_;
}

// What the next resume from `from` into `out` rewinds (Note [Rewinding a resumed lowering]).
void ResumableLowerer::keep_rewind(const Checkpoint& from, const Program& out) {
  rewind_.generation = from.generation_;
  rewind_.lowerings = lowerings();
  rewind_.program = &out;
  for (std::size_t s = 0; s < kFixedStreamCount; ++s)
    rewind_.stream_sizes[s] = out.streams[s].size();
  rewind_.operands = out.operands.size();
  rewind_.buffers = out.buffers.size();
  rewind_.events = out.events.size();
  rewind_.host_slots = out.host_slots.size();
  rewind_.body = body_.size();
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
bool ResumableLowerer::rewind(const Checkpoint& from) {
  Program& out = *program_;
  Rewind& r = rewind_;
  if (r.generation != from.generation_ || r.lowerings != lowerings() || r.program != &out ||
      out.operands.size() != r.operands || out.buffers.size() != r.buffers ||
      out.events.size() != r.events || out.host_slots.size() != r.host_slots ||
      body_.size() != r.body)
    return false;
  for (std::size_t s = 0; s < kFixedStreamCount; ++s) {
    if (out.streams[s].size() != r.stream_sizes[s]) return false;
  }
  const Program& p = from.program_;
  out.operands.resize(p.operands.size());
  out.buffers.resize(p.buffers.size());
  out.events.resize(p.events.size());
  for (std::size_t e : r.events_changed) out.events[e].cause = p.events[e].cause;
  out.host_slots.resize(p.host_slots.size());
  for (std::size_t s = 0; s < kFixedStreamCount; ++s) {
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
bool ResumableLowerer::place_frees_after(const Checkpoint& from, bool rewound) {
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
      out.push_back(
          {InstrKind::kFree, in.op, free_items_[static_cast<std::size_t>(k)], -1, 0, 0, 0});
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

}  // namespace memplan::search
