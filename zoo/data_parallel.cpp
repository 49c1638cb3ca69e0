// Note [Data-parallel steps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What each rank's step holds and waits for, as PyTorch 2.x runs data parallelism by default.
// Collectives run on a stream of their own ("nccl", stream 1) in one process group, numbered in
// issue order; an op there starts once the compute ops issued before it have ended (Note [Device
// streams]), so an all-gather issued ahead of the ops that need it overlaps the ops before them.
//
// DDP (torch.nn.parallel.DistributedDataParallel, gradient_as_bucket_view=False): the gradients
// are packed into buckets in the reverse order of the parameters' first use (the order backward
// makes them), the first of first_bucket_bytes, the others of bucket_bytes; a bucket is
// all-reduced as soon as the backward op that writes its last gradient has run, and the update
// waits for every bucket. The buckets are buffers of their own, allocated with the model and held
// throughout: each is a resident tensor ("ddp.bucket3") its all-reduce reads.
//
// FSDP (FullyShardedDataParallel with a wrap policy of one unit per repeated block, fsdp_unit;
// FSDP2's fully_shard per block alike): each unit's parameters are one flat parameter of which a
// rank holds 1/N (padded: ceil(bytes / N)), as it holds 1/N of their optimizer state and of their
// gradients after the reduce-scatter. Before a unit's first forward op, an all-gather makes its
// full parameters (the shards gathered, N times a shard), which its forward and backward ops read
// instead of the parameters: a feature map, which FULL_SHARD frees after the unit's last forward
// op and gathers again for backward (a plan's recomputation of it, the all-gather re-run) and
// SHARD_GRAD_OP keeps. That choice and the backward prefetch are plan variables, whose default the
// job records (Distributed::fsdp: Note [FSDP's setting in a plan] in core/fsdp_setting.hpp; the
// root, the parameters of no block — embeddings, the final norm, the head — is never resharded). A
// unit's forward all-gather is issued `prefetch` units ahead, in the order forward reaches the
// units (its first use). Once the last backward op that writes a gradient of a unit has run, a
// reduce-scatter reads the unit's full gradients and writes this rank's shard, which the update
// reads with the shards of the parameters and their state; the update's work is the shards'.
// FSDP2 holds a reduce-scatter's input until the next unit's post-backward, which makes the
// compute stream wait for it before issuing its own (FSDPParamGroup.post_backward's wait_event on
// reduce_scatter_state): the compute op after a reduce-scatter waits for the one before, and the
// gradients that one read go there (Lowerer::place_side_frees frees at such a join).
//
// Left out: FSDP's mixed-precision copies (param_dtype), CPU offload (memplan's host placement
// plans it), hybrid sharding, and the host time of the hooks.
#include "zoo/data_parallel.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/collective_cost.hpp"
#include "core/input_error.hpp"

namespace memplan::zoo {

using sim::Bytes;
using sim::Op;
using sim::OpId;
using sim::Phase;
using sim::Tensor;
using sim::TensorId;
using sim::TensorKind;

std::string_view to_string(DataParallel::Strategy strategy) {
  switch (strategy) {
    case DataParallel::Strategy::kDdp:
      return "ddp";
    case DataParallel::Strategy::kFullShard:
      return "fsdp full-shard";
    case DataParallel::Strategy::kShardGradOp:
      return "fsdp shard-grad-op";
  }
  return "?";
}

std::string fsdp_unit(std::string_view parameter) {
  std::optional<std::size_t> ends_in_digit;
  std::size_t start = 0;
  while (start < parameter.size()) {
    const std::size_t dot = std::min(parameter.find('.', start), parameter.size());
    const std::string_view part = parameter.substr(start, dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits) return std::string(parameter.substr(0, dot));
    if (!ends_in_digit && !part.empty() && part.back() >= '0' && part.back() <= '9' &&
        dot < parameter.size())
      ends_in_digit = dot;
    start = dot + 1;
  }
  return ends_in_digit ? std::string(parameter.substr(0, *ends_in_digit)) : std::string();
}

namespace {

// The update op's inputs as zoo/network.cpp lists them: the parameters, their gradients in the
// same order, then each optimizer state as a run of one tensor per parameter.
struct Trainable {
  TensorId param = sim::kNoTensor;
  TensorId grad = sim::kNoTensor;
  std::vector<TensorId> states;
};

std::vector<Trainable> trainables(const sim::Workload& w, const Op& update) {
  std::vector<TensorId> params, grads, states;
  for (TensorId t : update.inputs) {
    switch (w.tensor(t).kind) {
      case TensorKind::kParameter:
        params.push_back(t);
        break;
      case TensorKind::kGradient:
        grads.push_back(t);
        break;
      case TensorKind::kOptimizerState:
        states.push_back(t);
        break;
      default:
        break;
    }
  }
  MEMPLAN_CHECK(
      grads.size() == params.size() && states.size() % std::max<std::size_t>(1, params.size()) == 0,
      "the zoo's update lists each parameter, its gradient and its states");
  std::vector<Trainable> out(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    out[i].param = params[i];
    out[i].grad = grads[i];
    for (std::size_t s = i; s < states.size(); s += params.size())
      out[i].states.push_back(states[s]);
  }
  return out;
}

// The step being rewritten: ops copied in order, with new ops issued before or after them, ids
// renumbered.
class Rewriter {
 public:
  Rewriter(const sim::Workload& step, std::int32_t world_size, const sim::Interconnect& net)
      : step_(step),
        world_size_(world_size),
        net_(net),
        before_(step.ops.size()),
        after_(step.ops.size()) {
    out_.provenance = step.provenance;
    out_.device = step.device;
    out_.streams = {"compute", "nccl"};
    out_.tensors = step.tensors;
    for (Tensor& t : out_.tensors) t.producer = sim::kNoOp;  // set again as ops are placed
  }

  TensorId add_tensor(std::string name, TensorKind kind, Bytes bytes) {
    Tensor t;
    t.id = sim::tensor_id(out_.tensors.size());
    t.name = std::move(name);
    t.kind = kind;
    t.bytes = bytes;
    out_.tensors.push_back(std::move(t));
    return out_.tensors.back().id;
  }

  /// A collective of `kind` over every rank, reading `inputs` and writing `output` (or none),
  /// issued just before (or after) original op `at`.
  void collective(std::string name, sim::CollectiveKind kind, Phase phase, Bytes in, Bytes out,
                  std::vector<TensorId> inputs, TensorId output, std::size_t at, bool after) {
    Op op;
    op.name = std::move(name);
    op.layer = sim::LayerType::named(fmt::format("nccl:{}", sim::to_string(kind)));
    op.phase = phase;
    op.stream = 1;
    op.inputs = std::move(inputs);
    if (output != sim::kNoTensor) op.outputs = {output};
    sim::Collective c;
    c.kind = kind;
    c.in_bytes = in;
    c.out_bytes = out;
    c.group = "0";
    op.collective = c;
    (after ? after_ : before_)[at].push_back(std::move(op));
  }

  /// Original op `i` reads `to` where it read `from` (nothing: kNoTensor).
  void redirect(std::size_t i, TensorId from, TensorId to) { redirects_[i][from] = to; }
  /// Original op `i` reads `inputs` too.
  void add_inputs(std::size_t i, const std::vector<TensorId>& inputs) {
    auto& extra = extra_[i];
    extra.insert(extra.end(), inputs.begin(), inputs.end());
  }
  /// Original op `i` does `share` of its work (an update of the shards).
  void scale(std::size_t i, double share) { share_[i] = share; }
  /// Tensor `t` of the step is gone (a parameter or state replaced by a shard): no op reads it.
  void drop(TensorId t) { dropped_.push_back(t); }

  /// The step with every new op in place, the update (original op `update`) waiting for every
  /// collective issued before it, the compute op after a reduce-scatter for the one before it
  /// (FSDP2's post-backward waits for the previous reduce-scatter and lets its input go), the
  /// dropped tensors gone.
  sim::Workload finish(std::size_t update) {
    std::vector<OpId> collectives_so_far;
    std::int64_t sequence = 0;
    OpId last_reduce_scatter = sim::kNoOp;
    OpId unwaited_reduce_scatter = sim::kNoOp;  // for the next compute op to wait for
    auto place = [&](Op op) {
      op.id = sim::op_id(out_.ops.size());
      if (op.collective) {
        op.collective->sequence = sequence++;
        op.duration_ns = sim::collective_cost(*op.collective, 0, world_size_, net_).transfer_ns;
        collectives_so_far.push_back(op.id);
        if (op.collective->kind == sim::CollectiveKind::kReduceScatter) {
          unwaited_reduce_scatter = last_reduce_scatter;
          last_reduce_scatter = op.id;
        }
      } else if (unwaited_reduce_scatter != sim::kNoOp) {
        const OpId waited = std::exchange(unwaited_reduce_scatter, sim::kNoOp);
        if (std::find(op.after.begin(), op.after.end(), waited) == op.after.end())
          op.after.push_back(waited);
      }
      for (TensorId t : op.outputs) out_.tensors[index(t)].producer = op.id;
      out_.ops.push_back(std::move(op));
      return out_.ops.back().id;
    };
    std::vector<OpId> renumbered(step_.ops.size());
    for (std::size_t i = 0; i < step_.ops.size(); ++i) {
      for (Op& op : before_[i]) place(std::move(op));
      Op op = step_.ops[i];
      if (const auto r = redirects_.find(i); r != redirects_.end()) {
        std::vector<TensorId> inputs;
        for (TensorId t : op.inputs) {
          const auto to = r->second.find(t);
          const TensorId x = to == r->second.end() ? t : to->second;
          if (x != sim::kNoTensor && std::find(inputs.begin(), inputs.end(), x) == inputs.end())
            inputs.push_back(x);
        }
        op.inputs = std::move(inputs);
      }
      if (const auto e = extra_.find(i); e != extra_.end())
        op.inputs.insert(op.inputs.end(), e->second.begin(), e->second.end());
      if (const auto share = share_.find(i); share != share_.end()) {
        op.duration_ns =
            static_cast<sim::Nanoseconds>(static_cast<double>(op.duration_ns) * share->second);
        if (op.flops) *op.flops *= share->second;
        if (op.bytes_moved)
          op.bytes_moved = static_cast<Bytes>(static_cast<double>(*op.bytes_moved) * share->second);
      }
      if (op.differentiates != sim::kNoOp) op.differentiates = renumbered[index(op.differentiates)];
      for (OpId& a : op.after) a = renumbered[index(a)];
      if (i == update) op.after = collectives_so_far;
      renumbered[i] = place(std::move(op));
      for (Op& c : after_[i]) place(std::move(c));
    }
    compact();
    return std::move(out_);
  }

 private:
  // Removes the dropped tensors, renumbering the others.
  void compact() {
    std::vector<TensorId> id(out_.tensors.size(), sim::kNoTensor);
    std::vector<bool> gone(out_.tensors.size(), false);
    for (TensorId t : dropped_) gone[index(t)] = true;
    std::vector<Tensor> kept;
    for (Tensor& t : out_.tensors) {
      if (gone[index(t.id)]) continue;
      id[index(t.id)] = sim::tensor_id(kept.size());
      kept.push_back(std::move(t));
    }
    for (Tensor& t : kept) {
      t.id = id[index(t.id)];
      if (t.in_place_of != sim::kNoTensor) t.in_place_of = id[index(t.in_place_of)];
    }
    for (Op& op : out_.ops) {
      for (TensorId& t : op.inputs) {
        MEMPLAN_CHECK(!gone[index(t)], "a dropped tensor is read by no op");
        t = id[index(t)];
      }
      for (TensorId& t : op.outputs) t = id[index(t)];
    }
    out_.tensors = std::move(kept);
  }

  const sim::Workload& step_;
  std::int32_t world_size_;
  const sim::Interconnect& net_;
  sim::Workload out_;
  std::vector<std::vector<Op>> before_, after_;
  std::map<std::size_t, std::map<TensorId, TensorId>> redirects_;
  std::map<std::size_t, std::vector<TensorId>> extra_;
  std::map<std::size_t, double> share_;
  std::vector<TensorId> dropped_;
};

Bytes shard_of(Bytes bytes, std::int32_t n) {
  return (bytes + n - 1) / n;
}

// Per tensor, the ops (indices) that read it, in order: one pass over the ops.
std::vector<std::vector<std::size_t>> readers(const sim::Workload& w) {
  std::vector<std::vector<std::size_t>> out(w.tensors.size());
  for (std::size_t i = 0; i < w.ops.size(); ++i) {
    for (TensorId t : w.ops[i].inputs) out[index(t)].push_back(i);
  }
  return out;
}

void add_ddp(const sim::Workload& w, const DataParallel& dp,
             const std::vector<Trainable>& trainable, Rewriter& r) {
  // Reverse order of first use: the order backward writes the gradients.
  std::vector<std::pair<std::size_t, const Trainable*>> by_use;
  const auto read_by = readers(w);
  for (const Trainable& t : trainable) {
    const auto& use = read_by[index(t.param)];
    by_use.emplace_back(use.empty() ? w.ops.size() : use.front(), &t);
  }
  std::stable_sort(by_use.begin(), by_use.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<const Trainable*>> buckets(1);
  Bytes filled = 0;
  for (const auto& [use, t] : by_use) {
    const Bytes cap = buckets.size() == 1 ? dp.first_bucket_bytes : dp.bucket_bytes;
    if (!buckets.back().empty() && filled + w.tensor(t->grad).bytes > cap) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(t);
    filled += w.tensor(t->grad).bytes;
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    Bytes bytes = 0;
    std::size_t ready = 0;
    std::vector<TensorId> inputs;
    for (const Trainable* t : buckets[b]) bytes += w.tensor(t->grad).bytes;
    inputs.push_back(r.add_tensor(fmt::format("ddp.bucket{}", b), TensorKind::kParameter, bytes));
    for (const Trainable* t : buckets[b]) {
      inputs.push_back(t->grad);
      ready = std::max(ready, index(w.tensor(t->grad).producer));
    }
    r.collective(fmt::format("ddp.bucket{}.all_reduce", b), sim::CollectiveKind::kAllReduce,
                 Phase::kBackward, bytes, bytes, std::move(inputs), sim::kNoTensor, ready, true);
  }
}

struct Unit {
  std::string name;
  std::vector<const Trainable*> members;
  std::vector<std::size_t> forward_ops, backward_ops;  // that read its parameters
  std::size_t last_grad = 0;                           // the last op writing one of its gradients
  Bytes bytes = 0;
};

// The FSDP units of the trainable parameters that forward reads, in the order forward reaches
// them (each with its ops sorted).
std::vector<Unit> fsdp_units(const sim::Workload& w, const std::vector<Trainable>& trainable) {
  std::map<std::string, Unit> by_name;
  const auto read_by = readers(w);
  for (const Trainable& t : trainable) {
    Unit& u = by_name[fsdp_unit(w.tensor(t.param).name)];
    u.members.push_back(&t);
    u.bytes += w.tensor(t.param).bytes;
    u.last_grad = std::max(u.last_grad, index(w.tensor(t.grad).producer));
    for (std::size_t i : read_by[index(t.param)]) {
      if (w.ops[i].phase == Phase::kForward) u.forward_ops.push_back(i);
      if (w.ops[i].phase == Phase::kBackward) u.backward_ops.push_back(i);
    }
  }
  std::vector<Unit> units;
  for (auto& [name, u] : by_name) {
    if (u.forward_ops.empty()) continue;
    u.name = name.empty() ? std::string("root") : name;
    std::sort(u.forward_ops.begin(), u.forward_ops.end());
    std::sort(u.backward_ops.begin(), u.backward_ops.end());
    units.push_back(std::move(u));
  }
  std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    return a.forward_ops.front() < b.forward_ops.front();
  });
  return units;
}

void add_fsdp(const sim::Workload& w, const DataParallel& dp,
              const std::vector<Trainable>& trainable, std::size_t update, Rewriter& r) {
  const std::int32_t n = dp.world_size;
  std::vector<Unit> units = fsdp_units(w, trainable);
  std::vector<Unit*> forward_order(units.size());
  std::transform(units.begin(), units.end(), forward_order.begin(), [](Unit& u) { return &u; });
  const auto issue_at = [&](std::size_t k) {
    const auto p = static_cast<std::size_t>(dp.prefetch);
    return forward_order[k >= p ? k - p : 0]->forward_ops.front();
  };
  std::vector<TensorId> update_inputs;
  for (std::size_t k = 0; k < forward_order.size(); ++k) {
    Unit& u = *forward_order[k];
    const Bytes shard = shard_of(u.bytes, n);
    const TensorId flat =
        r.add_tensor(u.name + ".flat_param (shard)", TensorKind::kParameter, shard);
    const TensorId gathered =
        r.add_tensor(u.name + ".flat_param (gathered)", TensorKind::kActivation, shard * n);
    r.collective(u.name + ".all_gather", sim::CollectiveKind::kAllGather, Phase::kForward, shard,
                 shard * n, {flat}, gathered, issue_at(k), false);
    const TensorId grad_shard =
        r.add_tensor(u.name + ".flat_param.grad (shard)", TensorKind::kGradient, shard);
    std::vector<TensorId> grads;
    for (const Trainable* t : u.members) {
      grads.push_back(t->grad);
      for (std::size_t i : u.forward_ops) r.redirect(i, t->param, gathered);
      for (std::size_t i : u.backward_ops) r.redirect(i, t->param, gathered);
      r.redirect(update, t->param, sim::kNoTensor);
      r.redirect(update, t->grad, sim::kNoTensor);
      r.drop(t->param);
      for (TensorId s : t->states) {
        r.redirect(update, s, sim::kNoTensor);
        r.drop(s);
      }
    }
    r.collective(u.name + ".reduce_scatter", sim::CollectiveKind::kReduceScatter, Phase::kBackward,
                 shard * n, shard, std::move(grads), grad_shard, u.last_grad, true);
    update_inputs.push_back(flat);
    update_inputs.push_back(grad_shard);
    const std::size_t states = u.members.front()->states.size();
    for (std::size_t s = 0; s < states; ++s) {
      update_inputs.push_back(r.add_tensor(fmt::format("{}.flat_param.state{} (shard)", u.name, s),
                                           TensorKind::kOptimizerState, shard));
    }
  }
  r.add_inputs(update, update_inputs);
  Bytes full = 0, sharded = 0;
  for (const Unit* u : forward_order) {
    full += u->bytes;
    sharded += shard_of(u->bytes, n);
  }
  if (full > 0) r.scale(update, static_cast<double>(sharded) / static_cast<double>(full));
}

}  // namespace

std::string describe(const DataParallel& dp, const sim::Interconnect& net) {
  return fmt::format(
      "{} over {} ranks{} on {}", to_string(dp.strategy), dp.world_size,
      dp.strategy == DataParallel::Strategy::kDdp ? "" : fmt::format(" (prefetch {})", dp.prefetch),
      net.name);
}

std::optional<std::string_view> default_fabric(std::string_view device) {
  if (device.rfind("a100", 0) == 0) return "nvlink3";
  if (device.rfind("h100", 0) == 0 || device == "gh200") return "nvlink4";
  if (device.rfind("b200", 0) == 0) return "nvlink5";
  if (device.rfind("mi300x", 0) == 0) return "xgmi";
  return std::nullopt;
}

sim::Job data_parallel_job(const sim::Workload& step, const DataParallel& dp,
                           const sim::Interconnect& net) {
  if (dp.world_size < 2) {
    throw sim::InputError("--data-parallel",
                          fmt::format("{} ranks: data parallelism needs 2 or more", dp.world_size));
  }
  const auto update = std::find_if(step.ops.begin(), step.ops.end(),
                                   [](const Op& o) { return o.phase == Phase::kUpdate; });
  if (update == step.ops.end()) {
    throw sim::InputError("--data-parallel", "the step has no update: nothing to synchronise");
  }
  const std::size_t u = static_cast<std::size_t>(update - step.ops.begin());
  const std::vector<Trainable> trainable = trainables(step, *update);
  Rewriter r(step, dp.world_size, net);
  if (dp.strategy == DataParallel::Strategy::kDdp) {
    add_ddp(step, dp, trainable, r);
  } else {
    add_fsdp(step, dp, trainable, u, r);
  }
  sim::Workload rank0 = r.finish(u);
  rank0.distributed = sim::Distributed{"nccl", 0, dp.world_size, std::nullopt, std::nullopt};
  if (dp.strategy != DataParallel::Strategy::kDdp) {
    rank0.distributed->fsdp =
        sim::FsdpSetting{dp.strategy == DataParallel::Strategy::kFullShard, dp.prefetch};
  }
  rank0.provenance.note += "; " + describe(dp, net);
  sim::Job job;
  job.ranks.push_back(std::move(rank0));  // its peers alike (core/job.hpp)
  return job;
}

}  // namespace memplan::zoo
