#include "sim/lowering.hpp"

#include <algorithm>
#include <limits>

#include "sim/check.hpp"
#include "sim/feature_maps.hpp"
#include "sim/liveness.hpp"

namespace memplan::sim {

namespace {

constexpr std::int64_t kNeverFreed = std::numeric_limits<std::int64_t>::max();

class Lowering {
 public:
  Lowering(const Workload& w, const Plan& plan) : w_(w) {
    const std::size_t n_tensors = w.tensors.size();
    const std::size_t n_ops = w.ops.size();
    decision_.assign(n_tensors, nullptr);
    for (const Decision& d : plan.decisions) decision_[static_cast<std::size_t>(d.tensor)] = &d;
    loc_.assign(n_tensors, -1);
    slot_.assign(n_tensors, -1);
    in_event_.assign(n_tensors, -1);
    out_event_.assign(n_tensors, -1);
    awaiting_in_.assign(n_tensors, false);
    encoded_.assign(n_tensors, -1);
    prefetch_at_.resize(n_ops);
    forward_drop_at_.resize(n_ops);
    drop_at_.resize(n_ops);

    const Liveness liveness = analyze_liveness(w);
    for (const Tensor& t : w.tensors) {
      if (is_preexisting(t.kind))
        continue;  // cannot be regenerated: stays until its last reference
      const OpId last = liveness.last_use[static_cast<std::size_t>(t.id)];
      drop_at_[static_cast<std::size_t>(last == kNoId ? t.producer : last)].push_back(t.id);
    }
    for (const FeatureMap& map : find_feature_maps(w)) {
      const Decision* d = decision_[static_cast<std::size_t>(map.tensor)];
      if (d == nullptr || d->action == Action::kKeep) continue;
      const OpId producer = w.tensor(map.tensor).producer;
      const OpId drop =
          map.forward_uses.empty() ? producer : std::max(producer, map.forward_uses.back());
      forward_drop_at_[static_cast<std::size_t>(drop)].push_back(map.tensor);
      if (d->action == Action::kSwap) {
        OpId at = d->prefetch_before;
        if (at == kNoId) {
          const OpId first_backward = map.backward_uses.front();
          at = first_backward - 1 > drop ? first_backward - 1 : first_backward;
        }
        prefetch_at_[static_cast<std::size_t>(at)].push_back(map.tensor);
      }
      ++program_.action_counts[static_cast<std::size_t>(d->action)];
    }
    program_.action_counts[static_cast<std::size_t>(Action::kKeep)] =
        plan.decisions.size() - program_.action_counts[1] - program_.action_counts[2] -
        program_.action_counts[3];
  }

  Program run() {
    // Tensors that exist before the step and that some op reads.
    std::vector<bool> read(w_.tensors.size(), false);
    for (const Op& op : w_.ops) {
      for (TensorId t : op.inputs) read[static_cast<std::size_t>(t)] = true;
    }
    for (const Tensor& t : w_.tensors) {
      if (!is_preexisting(t.kind) || !read[static_cast<std::size_t>(t.id)]) continue;
      const BufferId b = new_tensor_buffer(t.id, kNoId);
      if (is_persistent(t.kind)) last_ref_[static_cast<std::size_t>(b)] = kNeverFreed;
      loc_[static_cast<std::size_t>(t.id)] = b;
    }
    for (const Op& op : w_.ops) {
      program_.op_compute_ns += op.duration_ns;
      for (TensorId t : prefetch_at_[static_cast<std::size_t>(op.id)]) {
        if (loc_[static_cast<std::size_t>(t)] < 0) issue_prefetch(t, op.id);
      }
      emit_op(op, InstrKind::kRun);
      for (TensorId t : op.outputs) {
        const Decision* d = decision_[static_cast<std::size_t>(t)];
        if (d != nullptr && d->action == Action::kSwap) issue_copy_out(t, op.id);
      }
      for (TensorId t : forward_drop_at_[static_cast<std::size_t>(op.id)]) forward_drop(t, op.id);
      for (TensorId t : drop_at_[static_cast<std::size_t>(op.id)])
        loc_[static_cast<std::size_t>(t)] = -1;
    }
    place_frees();
    return std::move(program_);
  }

 private:
  std::vector<Instruction>& compute() { return body_; }
  std::vector<Instruction>& stream(StreamId s) {
    return program_.streams[static_cast<std::size_t>(s)];
  }

  std::int64_t emit(Instruction in) {
    body_.push_back(in);
    return static_cast<std::int64_t>(body_.size()) - 1;
  }
  void touch(BufferId b, std::int64_t at) {
    auto& ref = last_ref_[static_cast<std::size_t>(b)];
    if (ref != kNeverFreed) ref = std::max(ref, at);
  }

  BufferId new_buffer(Buffer buffer, OpId for_op) {
    const auto b = static_cast<BufferId>(program_.buffers.size());
    program_.buffers.push_back(buffer);
    last_ref_.push_back(-1);
    const auto at = emit({InstrKind::kAlloc, for_op, b, -1, 0, 0, 0});
    last_ref_[static_cast<std::size_t>(b)] = at;
    return b;
  }
  BufferId new_tensor_buffer(TensorId t, OpId for_op) {
    const Tensor& tensor = w_.tensor(t);
    return new_buffer({tensor.bytes, BufferRole::kTensor, tensor.kind, t, kNoId, Encoding::kNone},
                      for_op);
  }
  EventId new_event(WaitCause cause, TensorId t) {
    program_.events.push_back({cause, t});
    return static_cast<EventId>(program_.events.size()) - 1;
  }

  // Makes tensor t resident before `for_op` runs and returns its buffer.
  BufferId ensure(TensorId t, OpId for_op) {
    const auto ti = static_cast<std::size_t>(t);
    if (loc_[ti] < 0) {
      const Decision* d = decision_[ti];
      if (d != nullptr && d->action == Action::kSwap && slot_[ti] >= 0) {
        issue_prefetch(t, for_op);
      } else if (d != nullptr && d->action == Action::kEncode && encoded_[ti] >= 0) {
        const BufferId b = new_tensor_buffer(t, for_op);
        const BufferId e = encoded_[ti];
        const auto at = emit({InstrKind::kDecode, for_op, b, e, 0, 0, 0});
        touch(b, at);
        touch(e, at);
        loc_[ti] = b;
      } else {
        regenerate(t, for_op);
      }
    }
    if (awaiting_in_[ti]) {
      const auto at = emit({InstrKind::kWait, for_op, -1, in_event_[ti], 0, 0, 0});
      touch(loc_[ti], at);
      awaiting_in_[ti] = false;
    }
    MEMPLAN_CHECK(loc_[ti] >= 0, "an input is resident before its consumer runs");
    return loc_[ti];
  }

  void regenerate(TensorId t, OpId for_op) {
    const Tensor& tensor = w_.tensor(t);
    MEMPLAN_CHECK(tensor.producer != kNoId && w_.op(tensor.producer).phase == Phase::kForward,
                  "only tensors written by forward ops are regenerated");
    (void)for_op;
    emit_op(w_.op(tensor.producer), InstrKind::kRecompute);
    MEMPLAN_CHECK(loc_[static_cast<std::size_t>(t)] >= 0, "a regenerated tensor is resident");
  }

  // Emits op (run or recompute) with its inputs made resident, outputs and workspace allocated.
  void emit_op(const Op& op, InstrKind kind) {
    // Local: ensure() may recurse into emit_op for a recompute.
    std::vector<BufferId> operands;
    operands.reserve(op.inputs.size() + op.outputs.size() + 1);
    for (TensorId x : op.inputs) operands.push_back(ensure(x, op.id));
    // Inputs are resident now; allocate outputs (in place outputs take over their base's buffer).
    for (TensorId o : op.outputs) {
      const Tensor& out = w_.tensor(o);
      BufferId b = -1;
      if (out.in_place_of != kNoId) {
        b = loc_[static_cast<std::size_t>(out.in_place_of)];
        MEMPLAN_CHECK(b >= 0, "the base of an in-place output is resident");
        loc_[static_cast<std::size_t>(out.in_place_of)] = -1;
      } else {
        b = new_tensor_buffer(o, op.id);
      }
      operands.push_back(b);
      // A recompute may write an output that is still resident elsewhere: then its new copy is a
      // temporary freed right after (nothing points to it).
      if (kind == InstrKind::kRun || loc_[static_cast<std::size_t>(o)] < 0) {
        loc_[static_cast<std::size_t>(o)] = b;
      }
    }
    if (op.workspace_bytes > 0) {
      operands.push_back(new_buffer({op.workspace_bytes, BufferRole::kWorkspace,
                                     TensorKind::kWorkspace, kNoId, op.id, Encoding::kNone},
                                    op.id));
    }
    const auto begin = static_cast<std::int32_t>(program_.operands.size());
    program_.operands.insert(program_.operands.end(), operands.begin(), operands.end());
    const auto at = emit(
        {kind, op.id, -1, -1, begin, static_cast<std::int32_t>(operands.size()), op.duration_ns});
    for (BufferId b : operands) touch(b, at);
  }

  void issue_copy_out(TensorId t, OpId producer) {
    const auto ti = static_cast<std::size_t>(t);
    const BufferId b = loc_[ti];
    slot_[ti] = static_cast<HostSlotId>(program_.host_slots.size());
    program_.host_slots.push_back({t, w_.tensor(t).bytes});
    const EventId written = new_event(WaitCause::kProducer, t);
    out_event_[ti] = new_event(WaitCause::kSwapOut, t);
    emit({InstrKind::kRecord, producer, -1, written, 0, 0, 0});
    auto& d2h = stream(StreamId::kD2H);
    d2h.push_back({InstrKind::kWait, producer, -1, written, 0, 0, 0});
    d2h.push_back({InstrKind::kCopyOut, producer, b, slot_[ti], 0, 0, 0});
    d2h.push_back({InstrKind::kRecord, producer, -1, out_event_[ti], 0, 0, 0});
  }

  void issue_prefetch(TensorId t, OpId at_op) {
    const auto ti = static_cast<std::size_t>(t);
    MEMPLAN_CHECK(slot_[ti] >= 0, "a map is copied out before it is prefetched");
    const BufferId b = new_tensor_buffer(t, at_op);
    const EventId allocated = new_event(WaitCause::kAlloc, t);
    in_event_[ti] = new_event(WaitCause::kSwapIn, t);
    const auto at = emit({InstrKind::kRecord, at_op, -1, allocated, 0, 0, 0});
    touch(b, at);
    auto& h2d = stream(StreamId::kH2D);
    h2d.push_back({InstrKind::kWait, at_op, -1, allocated, 0, 0, 0});
    h2d.push_back({InstrKind::kCopyIn, at_op, b, slot_[ti], 0, 0, 0});
    h2d.push_back({InstrKind::kRecord, at_op, -1, in_event_[ti], 0, 0, 0});
    loc_[ti] = b;
    awaiting_in_[ti] = true;
  }

  // After the map's last forward use: release the device copy the plan does not keep.
  void forward_drop(TensorId t, OpId op) {
    const auto ti = static_cast<std::size_t>(t);
    const BufferId b = loc_[ti];
    MEMPLAN_CHECK(b >= 0, "a map is resident at its last forward use");
    const Decision& d = *decision_[ti];
    if (d.action == Action::kSwap) {
      // The buffer may only go once the copy-out has read it.
      touch(b, emit({InstrKind::kWait, op, -1, out_event_[ti], 0, 0, 0}));
    } else if (d.action == Action::kEncode) {
      const Tensor& tensor = w_.tensor(t);
      const BufferId e = new_buffer({encoded_bytes(d.encoding, tensor), BufferRole::kEncoded,
                                     tensor.kind, t, kNoId, d.encoding},
                                    op);
      const auto at = emit({InstrKind::kEncode, op, b, e, 0, 0, 0});
      touch(b, at);
      touch(e, at);
      encoded_[ti] = e;
    }
    loc_[ti] = -1;
  }

  // Rebuilds the compute stream with each buffer's free right after its last reference.
  void place_frees() {
    std::vector<std::vector<BufferId>> frees_after(body_.size());
    for (std::size_t b = 0; b < last_ref_.size(); ++b) {
      if (last_ref_[b] == kNeverFreed) continue;
      MEMPLAN_CHECK(last_ref_[b] >= 0, "every buffer is referenced");
      frees_after[static_cast<std::size_t>(last_ref_[b])].push_back(static_cast<BufferId>(b));
    }
    auto& out = stream(StreamId::kCompute);
    out.reserve(body_.size() + last_ref_.size());
    for (std::size_t i = 0; i < body_.size(); ++i) {
      out.push_back(body_[i]);
      for (BufferId b : frees_after[i])
        out.push_back({InstrKind::kFree, body_[i].op, b, -1, 0, 0, 0});
    }
  }

  const Workload& w_;
  Program program_;
  std::vector<Instruction> body_;  // compute stream before frees are placed
  std::vector<std::int64_t> last_ref_;
  std::vector<const Decision*> decision_;
  std::vector<BufferId> loc_;
  std::vector<HostSlotId> slot_;
  std::vector<EventId> in_event_;
  std::vector<EventId> out_event_;
  std::vector<bool> awaiting_in_;
  std::vector<BufferId> encoded_;
  std::vector<std::vector<TensorId>> prefetch_at_;
  std::vector<std::vector<TensorId>> forward_drop_at_;
  std::vector<std::vector<TensorId>> drop_at_;
};

}  // namespace

Program lower(const Workload& workload, const Plan& plan) {
  return Lowering(workload, plan).run();
}

}  // namespace memplan::sim
