// Note [Gathered parameters as feature maps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// memplan models FSDP's reshard after forward as a plan decision (Note [FSDP's setting in a plan]
// in core/fsdp_setting.hpp): a unit's gathered parameters are one feature map, made by the unit's
// forward all-gather from the rank's shards and read by its forward and backward ops; keeping it
// is SHARD_GRAD_OP, recomputing it (the all-gather re-run) FULL_SHARD, the recomputation's issue
// point the backward prefetch. Note [FSDP in a trace] (fsdp_steps.cpp) leaves an imported
// step with what the trace did: each all-gather's buffers lifetime_only tensors of the
// allocations, and the backward's re-gather a collective of its own. This last stage of an FSDP
// import turns that into the plannable form, from the trace's own structure:
//  - a unit is a forward all-gather whose inputs are the rank's shards (read_gathered). What holds
//    its unsharded parameters (its parts): FSDP2's copy-out tensors (one per parameter, made by
//    the op the copy-out precedes), else the gather's own tensors that a layer op reads (FSDP1's
//    unsharded flat parameter, which the parameters view);
//  - a backward all-gather re-gathers the unit whose shards the layer ops that read its parts (or
//    made them) read (the shards read_gathered took away from them), of the same bytes; every
//    backward gather must match one unit, and no unit two, else nothing changes;
//  - each unit's parts become one activation tensor of their bytes (`<gather>/params`, not
//    lifetime_only), an output of the forward gather, read by every op that read a part of the
//    unit's forward or backward gather or made one (the copy-out's op) and by every op that read
//    one of the unit's shards: so it lives from its gather to the unit's reshard after forward and
//    from its first backward use to the reshard after backward, as the recorded parts did;
//  - the backward gathers are removed with every tensor they served (their parts, their output
//    buffer and gloo's temporaries): the in-core plan with the setting applied re-runs the forward
//    gather in their place (Note [Re-running a side-stream op] in sim/lowering.cpp), which
//    allocates the map and, for the re-run alone, the forward gather's own buffers. The other
//    collectives keep their order; each group's sequence numbers are renumbered from 0 without the
//    removed calls, alike on every rank of a job (FSDP runs the same gathers on each), and the
//    lowering numbers the re-runs after them;
//  - the setting (Distributed::fsdp): reshard_after_forward when the backward re-gathered some
//    unit; backward_prefetch, how many units ahead in backward order (by each map's first backward
//    use) a re-gather was issued, the most of any unit: a unit is counted as issued before
//    another's first backward use when its all-gather started before that op's event ended (FSDP2
//    issues its prefetch in the pre-backward hook, inside the autograd node of that op). Without
//    backward gathers the trace kept its gathered parameters (SHARD_GRAD_OP), prefetch 1 (FSDP's
//    default).
// A step whose structure does not map (a backward gather of no unit's shards, no parts) stays as
// Note [FSDP in a trace] leaves it, and ImportReport::fsdp_unplanned says why.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/check.hpp"
#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

using sim::Bytes;
using sim::Nanoseconds;
using sim::OpId;
using sim::TensorId;

struct StepBuilder::GatheredUnit {
  OpId forward = sim::kNoOp;   // the unit's forward all-gather
  OpId backward = sim::kNoOp;  // its re-gather in backward; kNoOp when none
};

namespace {

bool is_all_gather(const sim::Op& o) {
  return o.collective && o.collective->kind == sim::CollectiveKind::kAllGather;
}

// Removes `dead_ops` and `dead_tensors` from `w`, the others renumbered in order; a removed op's
// host dispatch time goes to the next op's, a removed collective's place in its group to the
// calls after it.
void remove_from_workload(sim::Workload& w, const std::set<OpId>& dead_ops,
                          const std::set<TensorId>& dead_tensors) {
  std::vector<TensorId> tensor_to(w.tensors.size(), sim::kNoTensor);
  std::vector<OpId> op_to(w.ops.size(), sim::kNoOp);
  std::vector<sim::Tensor> tensors;
  for (sim::Tensor& t : w.tensors) {
    if (dead_tensors.count(t.id) > 0) continue;
    tensor_to[index(t.id)] = sim::tensor_id(tensors.size());
    tensors.push_back(std::move(t));
  }
  std::vector<sim::Op> ops;
  Nanoseconds dispatch = 0;  // of removed ops, for the next one kept
  for (sim::Op& o : w.ops) {
    if (dead_ops.count(o.id) > 0) {
      if (o.host) dispatch += o.host->dispatch_ns;
      continue;
    }
    op_to[index(o.id)] = sim::op_id(ops.size());
    if (o.host) o.host->dispatch_ns += std::exchange(dispatch, 0);
    ops.push_back(std::move(o));
  }
  auto tensors_of = [&](std::vector<TensorId>& list) {
    std::erase_if(list, [&](TensorId t) { return tensor_to[index(t)] == sim::kNoTensor; });
    for (TensorId& t : list) t = tensor_to[index(t)];
  };
  auto op_of = [&](OpId o) { return o == sim::kNoOp ? sim::kNoOp : op_to[index(o)]; };
  for (sim::Tensor& t : tensors) {
    t.id = tensor_to[index(t.id)];
    MEMPLAN_CHECK(t.producer == sim::kNoOp || op_of(t.producer) != sim::kNoOp,
                  "a tensor kept has its producer kept");
    t.producer = op_of(t.producer);
    if (t.in_place_of != sim::kNoTensor) t.in_place_of = tensor_to[index(t.in_place_of)];
  }
  for (sim::Op& o : ops) {
    o.id = op_of(o.id);
    tensors_of(o.inputs);
    tensors_of(o.outputs);
    o.differentiates = op_of(o.differentiates);
    std::erase_if(o.after, [&](OpId a) { return op_of(a) == sim::kNoOp; });
    for (OpId& a : o.after) a = op_of(a);
  }
  // Each group's calls numbered again from 0, in their order.
  std::map<std::string, std::vector<sim::Collective*>> groups;
  for (sim::Op& o : ops) {
    if (o.collective) groups[o.collective->group].push_back(&*o.collective);
  }
  for (auto& [_, calls] : groups) {
    std::stable_sort(calls.begin(), calls.end(),
                     [](const auto* a, const auto* b) { return a->sequence < b->sequence; });
    for (std::size_t k = 0; k < calls.size(); ++k)
      calls[k]->sequence = static_cast<std::int64_t>(k);
  }
  w.tensors = std::move(tensors);
  w.ops = std::move(ops);
}

}  // namespace

// The tensors that hold `gather`'s unsharded parameters: FSDP2's copy-outs (made by another op
// than the gather), else those of the gather's own tensors that a layer op reads.
std::vector<TensorId> StepBuilder::gathered_parts(OpId gather) const {
  const auto served = gather_memory_.find(gather);
  if (served == gather_memory_.end()) return {};
  std::vector<TensorId> parts;
  for (TensorId t : served->second) {
    if (tensor(t).producer != gather) parts.push_back(t);
  }
  if (!parts.empty()) return parts;
  for (TensorId t : served->second) {
    const bool read = std::any_of(workload_.ops.begin(), workload_.ops.end(), [&](const auto& o) {
      return !o.collective && std::find(o.inputs.begin(), o.inputs.end(), t) != o.inputs.end();
    });
    if (read) parts.push_back(t);
  }
  return parts;
}

// What else the forward gather `gather` made besides its `parts`, so that its re-run makes only
// what the backward's re-gather did: a temporary nobody reads (gloo's) stays its output, made and
// freed again around the re-run as around the backward's gather; a buffer the layer ops read
// (FSDP2's all-gather output, which the copy-out reads and FSDP keeps until the next all-gather)
// is made by the first of them, the op the copy-out precedes, where the parts were made.
void StepBuilder::keep_out_of_regather(OpId gather, const std::vector<TensorId>& parts) {
  const std::vector<TensorId> outputs = op(gather).outputs;
  for (TensorId t : outputs) {
    if (!tensor(t).lifetime_only || std::find(parts.begin(), parts.end(), t) != parts.end())
      continue;
    const auto first = std::find_if(workload_.ops.begin(), workload_.ops.end(), [&](const auto& o) {
      return std::find(o.inputs.begin(), o.inputs.end(), t) != o.inputs.end();
    });
    if (first == workload_.ops.end()) continue;
    std::erase(op(gather).outputs, t);
    std::erase(first->inputs, t);
    first->outputs.push_back(t);
    workload_.tensors[index(t)].producer = first->id;
  }
}

// Each forward gather of shards with its backward re-gather; empty, with `why`, when the step's
// gathers do not map.
std::vector<StepBuilder::GatheredUnit> StepBuilder::match_gathers(std::string& why) const {
  const std::set<TensorId> shards(trainable_.begin(), trainable_.end());
  std::vector<GatheredUnit> units;
  std::map<TensorId, std::size_t> unit_of_shard;
  std::map<OpId, std::size_t> unit_of_op;  // forward layer ops by the unit whose parts they read
  std::vector<OpId> regathers;
  for (const sim::Op& o : workload_.ops) {
    if (!is_all_gather(o)) continue;
    if (o.phase != sim::Phase::kForward) {
      regathers.push_back(o.id);
      continue;
    }
    const std::vector<TensorId> parts = gathered_parts(o.id);
    const bool of_shards =
        !o.inputs.empty() && std::all_of(o.inputs.begin(), o.inputs.end(),
                                         [&](TensorId t) { return shards.count(t) > 0; });
    if (!of_shards || parts.empty()) {
      why = fmt::format("{}: no shards gathered into tensors that layer ops read", o.name);
      return {};
    }
    for (TensorId t : o.inputs) unit_of_shard.emplace(t, units.size());
    for (OpId r : users_of(parts, o.id)) {
      if (workload_.op(r).phase == sim::Phase::kForward) unit_of_op.emplace(r, units.size());
    }
    units.push_back({o.id, sim::kNoOp});
  }
  for (OpId g : regathers) {
    // The units not matched yet, of g's bytes, whose shards the ops that made or read g's parts
    // read, or whose forward ops they differentiate, by how often.
    std::map<std::size_t, int> votes;
    auto vote = [&](std::size_t unit) {
      if (units[unit].backward == sim::kNoOp &&
          workload_.op(units[unit].forward).collective->out_bytes ==
              workload_.op(g).collective->out_bytes)
        ++votes[unit];
    };
    for (OpId u : users_of(gathered_parts(g), g)) {
      if (const auto read = shard_reads_.find(u); read != shard_reads_.end()) {
        for (TensorId s : read->second) {
          if (const auto unit = unit_of_shard.find(s); unit != unit_of_shard.end())
            vote(unit->second);
        }
      }
      if (const auto f = unit_of_op.find(workload_.op(u).differentiates); f != unit_of_op.end())
        vote(f->second);
    }
    const auto best =
        std::max_element(votes.begin(), votes.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best == votes.end()) {
      why = fmt::format("{}: re-gathers no unit's shards", workload_.op(g).name);
      return {};
    }
    units[best->first].backward = g;
  }
  return units;
}

// The ops that read one of `parts` or made it (another op than `gather`).
std::set<OpId> StepBuilder::users_of(const std::vector<TensorId>& parts, OpId gather) const {
  std::set<OpId> users;
  for (TensorId t : parts) {
    if (tensor(t).producer != gather) users.insert(tensor(t).producer);
  }
  for (const sim::Op& o : workload_.ops) {
    for (TensorId t : parts) {
      if (std::find(o.inputs.begin(), o.inputs.end(), t) != o.inputs.end()) users.insert(o.id);
    }
  }
  return users;
}

// The setting the trace ran (Note [Gathered parameters as feature maps]), from the units' maps'
// first backward uses and the re-gathers' start.
sim::FsdpSetting StepBuilder::recorded_setting(const std::vector<GatheredUnit>& units) const {
  sim::FsdpSetting setting{false, 1};
  std::unordered_map<OpId, std::pair<Nanoseconds, Nanoseconds>> span;  // each op's event
  for (const Unit& u : units_) {
    if (u.op != sim::kNoOp) span.try_emplace(u.op, event(u).start_ns, event(u).end_ns());
  }
  // Each unit's first backward use (its map is the forward gather's last output), in order.
  std::vector<std::pair<OpId, std::size_t>> order;
  for (std::size_t k = 0; k < units.size(); ++k) {
    const TensorId map = workload_.op(units[k].forward).outputs.back();
    for (const sim::Op& o : workload_.ops) {
      if (o.phase == sim::Phase::kBackward &&
          std::find(o.inputs.begin(), o.inputs.end(), map) != o.inputs.end()) {
        order.emplace_back(o.id, k);
        break;
      }
    }
  }
  std::sort(order.begin(), order.end());
  std::int32_t ahead = -1;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const OpId regather = units[order[k].second].backward;
    if (regather == sim::kNoOp || span.count(regather) == 0) continue;
    setting.reshard_after_forward = true;
    const Nanoseconds issued = span.at(regather).first;
    std::size_t j = 0;
    while (j < k && span.count(order[j].first) > 0 && span.at(order[j].first).second <= issued) ++j;
    ahead = std::max(ahead, static_cast<std::int32_t>(k - j));
  }
  if (ahead >= 0) setting.backward_prefetch = ahead;
  return setting;
}

// The ops that read unit `u`'s map: those that read one of its `parts` (of its forward gather and
// its backward's) or made one (the copy-out's op), but for a layer op whose shards are all another
// unit's (read_gathered gave it the latest gather of their size, a prefetched one of another
// unit), and every op that read one of the unit's shards.
std::set<OpId> StepBuilder::map_readers(const GatheredUnit& u,
                                        const std::vector<TensorId>& parts) const {
  const std::vector<TensorId>& shards = workload_.op(u.forward).inputs;
  auto reads_own = [&](const std::vector<TensorId>& read) {
    return std::any_of(read.begin(), read.end(), [&](TensorId s) {
      return std::find(shards.begin(), shards.end(), s) != shards.end();
    });
  };
  std::set<OpId> readers;
  for (OpId o : users_of(parts, u.forward)) {
    const auto read = shard_reads_.find(o);
    if (o != u.backward && !workload_.op(o).collective &&
        (read == shard_reads_.end() || reads_own(read->second)))
      readers.insert(o);
  }
  for (const auto& [o, read] : shard_reads_) {
    if (reads_own(read)) readers.insert(o);
  }
  return readers;
}

void StepBuilder::plan_gathered_parameters() {
  if (report_.fsdp.empty() || gather_memory_.empty()) return;
  std::string why;
  const std::vector<GatheredUnit> units = match_gathers(why);
  if (units.empty()) {
    report_.fsdp_unplanned = why.empty() ? "no all-gather of shards" : why;
    return;
  }
  std::set<OpId> dead_ops;
  std::set<TensorId> dead_tensors;
  for (const GatheredUnit& u : units) {
    std::vector<TensorId> parts = gathered_parts(u.forward);
    keep_out_of_regather(u.forward, parts);
    Bytes bytes = 0;
    for (TensorId t : parts) bytes += tensor(t).bytes;
    const auto map = sim::tensor_id(workload_.tensors.size());
    sim::Tensor t;
    t.id = map;
    t.name = fmt::format("{}/params", op(u.forward).name);
    t.kind = sim::TensorKind::kActivation;
    t.bytes = bytes;
    t.producer = u.forward;
    workload_.tensors.push_back(std::move(t));
    op(u.forward).outputs.push_back(map);
    if (u.backward != sim::kNoOp) {
      const std::vector<TensorId> again = gathered_parts(u.backward);
      parts.insert(parts.end(), again.begin(), again.end());
      dead_ops.insert(u.backward);
      const auto& served = gather_memory_.at(u.backward);
      dead_tensors.insert(served.begin(), served.end());
    }
    dead_tensors.insert(parts.begin(), parts.end());
    for (OpId r : map_readers(u, parts)) {
      if (r > u.forward) add_input(r, map);
    }
  }
  const sim::FsdpSetting setting = recorded_setting(units);
  remove_from_workload(workload_, dead_ops, dead_tensors);
  report_.fsdp_units = units.size();
  report_.fsdp_regathers = dead_ops.size();
  report_.fsdp_setting = setting;
}

}  // namespace memplan::importers::detail
