#include "search/bound/relaxation.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/program.hpp"
#include "memory/device_arena.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {
namespace {

using sim::Bytes;
using sim::Nanoseconds;
using sim::OpId;
using sim::TensorId;

// A regeneration re-runs at most this many ops for one map that the bound counts (fewer is still
// a lower bound).
constexpr std::size_t kMaxRerun = 64;

bool computes(const sim::Op& op) {
  return op.stream == 0 && !op.collective;
}

Nanoseconds fastest_ns(const sim::Op& op) {
  Nanoseconds best = op.duration_ns;
  for (const sim::Algorithm& a : op.algorithms) best = std::min(best, a.duration_ns);
  return best;
}

Bytes smallest_workspace(const sim::Op& op) {
  Bytes least = op.workspace_bytes;
  for (const sim::Algorithm& a : op.algorithms) least = std::min(least, a.workspace_bytes);
  return least > 0 ? sim::DeviceArena::aligned_size(least) : 0;
}

// The ops of each case: which run on the device, which on the compute stream, their shortest
// times and the earliest starts and ends of their runs.
void time_ops(const sim::Workload& w, const IdealRun& ideal, Relaxation& r) {
  const std::size_t n = w.ops.size();
  r.on_device.assign(n, true);
  r.on_compute.assign(n, false);
  r.min_ns.assign(n, 0);
  r.before_ns.assign(n, 0);
  r.tail_ns.assign(n + 1, 0);
  r.start_ns.assign(n, 0);
  r.end_ns.assign(n, 0);
  OpId first_update = sim::op_id(static_cast<std::int64_t>(n));
  for (const sim::Op& op : w.ops) {
    const std::size_t i = index(op.id);
    if (op.phase == sim::Phase::kUpdate) first_update = std::min(first_update, op.id);
    r.on_device[i] = !(r.host_update && op.phase == sim::Phase::kUpdate);
    r.on_compute[i] = r.on_device[i] && computes(op);
    r.min_ns[i] = r.on_compute[i] ? fastest_ns(op) : 0;
  }
  for (std::size_t i = 0; i < n; ++i) {
    r.before_ns[i] = i == 0 ? 0 : r.before_ns[i - 1] + r.min_ns[i - 1];
    if (r.origin == TimeOrigin::kComputeStart) {
      // From the compute stream's start, its own work before an op is all that is known.
      r.start_ns[i] = r.on_compute[i] ? r.before_ns[i] : -1;
      r.end_ns[i] = r.on_compute[i] ? r.before_ns[i] + r.min_ns[i] : -1;
    } else if (!r.host_update || sim::op_id(static_cast<std::int64_t>(i)) < first_update) {
      // With the update on the host, the ideal run's times hold before the first update op
      // only: later ops lose the update's work before them.
      r.start_ns[i] = ideal.start_ns[i];
      r.end_ns[i] = ideal.end_ns[i];
    }
  }
  for (std::size_t i = n; i-- > 0;) r.tail_ns[i] = r.tail_ns[i + 1] + r.min_ns[i];
  r.busy_ns = r.tail_ns[0];
  // Regenerations start at the first op that is not a forward op when every forward op comes
  // before it.
  OpId first_other = sim::op_id(static_cast<std::int64_t>(n));
  bool contiguous = true;
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kForward) {
      first_other = std::min(first_other, op.id);
    } else if (op.id > first_other) {
      contiguous = false;
    }
  }
  r.forward_end = contiguous ? first_other : sim::OpId{0};
}

// Per tensor, the device ops that write or read it, ascending.
std::vector<std::vector<OpId>> device_uses(const sim::Workload& w, const Relaxation& r) {
  std::vector<std::vector<OpId>> uses(w.tensors.size());
  for (const sim::Op& op : w.ops) {
    if (!r.on_device[index(op.id)]) continue;
    for (TensorId t : op.outputs) uses[index(t)].push_back(op.id);
    for (TensorId t : op.inputs) {
      auto& u = uses[index(t)];
      if (u.empty() || u.back() != op.id) u.push_back(op.id);
    }
  }
  return uses;
}

// Activations that every regeneration finds gone and must re-make: written by a forward op of the
// compute stream, read by forward ops only, not feature maps.
std::vector<bool> dropped_activations(const sim::Workload& w, const std::vector<int>& map_of) {
  std::vector<bool> dropped(w.tensors.size(), false);
  for (const sim::Tensor& t : w.tensors) {
    dropped[index(t.id)] = t.kind == sim::TensorKind::kActivation && t.producer != sim::kNoOp &&
                           w.op(t.producer).phase == sim::Phase::kForward &&
                           computes(w.op(t.producer)) && map_of[index(t.id)] < 0;
  }
  for (const sim::Op& op : w.ops) {
    if (op.phase == sim::Phase::kForward) continue;
    for (TensorId t : op.inputs) dropped[index(t)] = false;
  }
  return dropped;
}

// The ops a regeneration of `t` re-runs at least: its producer and, recursively, the producers of
// the dropped activations they read.
std::vector<OpId> rerun_ops(const sim::Workload& w, TensorId t, const std::vector<bool>& dropped) {
  std::vector<OpId> ops{w.tensor(t).producer};
  for (std::size_t k = 0; k < ops.size() && ops.size() < kMaxRerun; ++k) {
    for (TensorId in : w.op(ops[k]).inputs) {
      if (!dropped[index(in)]) continue;
      const OpId q = w.tensor(in).producer;
      if (std::find(ops.begin(), ops.end(), q) == ops.end()) ops.push_back(q);
    }
  }
  return ops;
}

using Intervals = std::vector<std::vector<std::pair<OpId, OpId>>>;

// Each feature map: held from its producer to its drop point, then away until its first use
// after it (by any action), and between two later uses by per-use recomputation only; a map that
// cannot be recomputed is held from its first to its last later use.
void relax_maps(const sim::Workload& w, const sim::Machine& machine,
                const EncodingOptions& encodings, const std::vector<std::vector<OpId>>& uses,
                Relaxation& r, Intervals& held) {
  const std::vector<sim::FeatureMap> maps = sim::find_feature_maps(w);
  std::vector<int> map_of(w.tensors.size(), -1);
  for (std::size_t m = 0; m < maps.size(); ++m) map_of[index(maps[m].tensor)] = static_cast<int>(m);
  const std::vector<bool> dropped = dropped_activations(w, map_of);
  const std::vector<bool> regenerable = sim::regenerable_tensors(w);
  std::vector<sim::Encoding> codecs;
  if (encodings.binarize) codecs.push_back(sim::Encoding::kBinarize);
  if (encodings.sparse) codecs.push_back(sim::Encoding::kSparse);
  if (encodings.precision_reduction) codecs.push_back(*encodings.precision_reduction);
  for (const sim::FeatureMap& fm : maps) {
    const sim::Tensor& t = w.tensor(fm.tensor);
    const OpId drop = sim::last_forward_use(fm, w);
    const auto& u = uses[index(t.id)];
    const auto later = std::upper_bound(u.begin(), u.end(), drop);
    held[index(t.id)].emplace_back(t.producer, drop);
    if (later == u.end()) continue;
    Absence a;
    a.tensor = t.id;
    a.bytes = sim::DeviceArena::aligned_size(t.bytes);
    a.recompute = regenerable[index(t.id)];
    if (a.recompute) a.rerun_forward = rerun_ops(w, t.id, dropped);
    Absence main = a;
    main.first = drop + 1;
    main.last = *later - 1;
    main.next = *later;
    main.copy = true;
    main.copy_out_ns = machine.d2h_copy_ns(t.bytes);
    main.release_ns = r.end_ns[index(t.producer)];
    main.copy_in_ns = machine.h2d_copy_ns(t.bytes);
    main.codec_ns = machine.codec_ns(t.bytes);
    for (sim::Encoding e : codecs) {
      sim::Decision d{t.id, sim::Action::kEncode, e};
      if (sim::decision_problem(d, fm, w).empty())
        main.encodings.emplace_back(e, sim::DeviceArena::aligned_size(sim::encoded_bytes(e, t)));
    }
    if (main.first <= main.last) r.absences.push_back(std::move(main));
    if (!a.recompute) {
      held[index(t.id)].emplace_back(*later, u.back());
      continue;
    }
    for (auto k = later; k + 1 != u.end(); ++k) {  // per-use recomputation between later uses
      if (*k + 1 > *(k + 1) - 1) continue;
      Absence gap = a;
      gap.first = *k + 1;
      gap.last = *(k + 1) - 1;
      gap.next = *(k + 1);
      r.absences.push_back(std::move(gap));
    }
  }
}

}  // namespace

IdealRun ideal_run(const sim::Workload& w, const sim::Machine& machine) {
  sim::Plan plan = sim::in_core_plan(w);
  for (const sim::Op& op : w.ops) {
    std::int32_t best = -1;
    Nanoseconds best_ns = op.duration_ns;
    for (std::size_t a = 0; a < op.algorithms.size(); ++a) {
      if (op.algorithms[a].duration_ns >= best_ns) continue;
      best = static_cast<std::int32_t>(a);
      best_ns = op.algorithms[a].duration_ns;
    }
    if (best >= 0) plan.algorithms.push_back({op.id, best});
  }
  sim::Machine unlimited = machine;
  unlimited.memory_bytes = std::numeric_limits<Bytes>::max() / 4;
  unlimited.host_memory_bytes.reset();
  const sim::Program program = sim::lower(w, plan);
  sim::EngineOptions options = sim::EngineOptions::totals();
  options.record_spans = true;
  sim::Engine engine;
  const sim::Timeline& timeline = engine.run(program, unlimited, options);
  IdealRun run;
  run.iteration_ns = timeline.iteration_ns;
  if (sim::has_host_side(w)) {
    sim::Engine repeated;
    run.period_ns = sim::step_period_ns(repeated, program, unlimited, timeline);
  }
  run.start_ns.assign(w.ops.size(), 0);
  run.end_ns.assign(w.ops.size(), 0);
  const auto& compute = program.stream(sim::StreamId::kCompute);
  for (const sim::Span& s : timeline.spans) {
    if (s.stream != sim::StreamId::kCompute) continue;
    const sim::Instruction& in = compute[static_cast<std::size_t>(s.index)];
    if (in.kind != sim::InstrKind::kRun) continue;
    run.start_ns[index(in.op)] = s.start_ns;
    run.end_ns[index(in.op)] = s.end_ns;
  }
  return run;
}

namespace {

// Each tensor a plan may place on the host (Note [Host placement] in core/plan.hpp), as the
// relaxation allows more: away between any two of its device uses and before its first (a
// pre-existing tensor's home is the host), back by a copy-in before each use; a gradient is
// copied out once written.
void relax_host_tensors(const sim::Workload& w, const sim::Machine& machine,
                        const std::vector<std::vector<OpId>>& uses, Relaxation& r,
                        std::vector<bool>& placeable) {
  for (sim::TensorKind kind : {sim::TensorKind::kParameter, sim::TensorKind::kOptimizerState,
                               sim::TensorKind::kInput, sim::TensorKind::kGradient}) {
    for (TensorId t : sim::host_placeable(w, kind)) {
      placeable[index(t)] = true;
      const sim::Tensor& tensor = w.tensor(t);
      const auto& u = uses[index(t)];
      if (u.empty()) continue;
      Absence a;
      a.tensor = t;
      a.bytes = sim::DeviceArena::aligned_size(tensor.bytes);
      a.copy = true;
      a.copy_in_ns = machine.h2d_copy_ns(tensor.bytes);
      if (kind == sim::TensorKind::kGradient) {
        a.copy_out_ns = machine.d2h_copy_ns(tensor.bytes);
        a.release_ns = r.end_ns[index(tensor.producer)];
      }
      // An update on the device writes it: written back after it (when that update's end is known
      // from the origin), and the compute stream waits for the write-back to free its device copy.
      for (OpId op : u) {
        if (!sim::is_persistent(kind) || w.op(op).phase != sim::Phase::kUpdate ||
            r.end_ns[index(op)] < 0)
          continue;
        a.writeback_ns = machine.d2h_copy_ns(tensor.bytes);
        a.writeback_after_ns = std::max(a.writeback_after_ns, r.end_ns[index(op)]);
      }
      const bool preexisting = sim::is_preexisting(kind);
      for (std::size_t k = preexisting ? 0 : 1; k < u.size(); ++k) {
        Absence gap = a;
        gap.first = k == 0 ? sim::OpId{0} : u[k - 1] + 1;
        gap.last = u[k] - 1;
        gap.next = u[k];
        if (gap.first <= gap.last) r.absences.push_back(std::move(gap));
      }
    }
  }
}

// The pre-existing tensors that the producers of absences away by recomputation read and no plan
// places on the host (Relaxation::kept_inputs), those held to the end (persistent) left out:
// every plan holds them across every op already.
void keep_inputs(const sim::Workload& w, const std::vector<std::vector<OpId>>& uses,
                 const std::vector<bool>& placeable, Relaxation& r) {
  std::vector<std::size_t> kept(w.tensors.size(), std::numeric_limits<std::size_t>::max());
  for (Absence& a : r.absences) {
    if (!a.recompute || a.rerun_forward.empty()) continue;
    for (TensorId t : w.op(a.rerun_forward.front()).inputs) {
      const sim::Tensor& tensor = w.tensor(t);
      const auto& u = uses[index(t)];
      if (!sim::is_preexisting(tensor.kind) || sim::is_persistent(tensor.kind) ||
          placeable[index(t)] || u.empty())
        continue;
      if (kept[index(t)] == std::numeric_limits<std::size_t>::max()) {
        kept[index(t)] = r.kept_inputs.size();
        r.kept_inputs.push_back({t, sim::DeviceArena::aligned_size(tensor.bytes), u.back()});
      }
      if (std::find(a.kept_inputs.begin(), a.kept_inputs.end(), kept[index(t)]) ==
          a.kept_inputs.end())
        a.kept_inputs.push_back(kept[index(t)]);
    }
  }
}

// Per op, the bytes every plan holds (Relaxation::base): the op's own tensors (an in-place output
// shares its base's buffer) and smallest workspace, and each held interval across it.
void count_base(const sim::Workload& w, const Intervals& held, Relaxation& r) {
  const std::size_t n = w.ops.size();
  std::vector<std::int64_t> diff(n + 1, 0);
  for (const sim::Tensor& t : w.tensors) {
    for (const auto& [from, to] : held[index(t.id)]) {
      diff[index(from)] += sim::DeviceArena::aligned_size(t.bytes);
      diff[index(to) + 1] -= sim::DeviceArena::aligned_size(t.bytes);
    }
  }
  r.base.assign(n, 0);
  std::int64_t across = 0;
  std::vector<TensorId> own;
  for (const sim::Op& op : w.ops) {
    const std::size_t i = index(op.id);
    across += diff[i];
    if (!r.on_device[i]) continue;
    own = op.inputs;
    own.insert(own.end(), op.outputs.begin(), op.outputs.end());
    std::sort(own.begin(), own.end());
    own.erase(std::unique(own.begin(), own.end()), own.end());
    Bytes bytes = across + smallest_workspace(op);
    for (TensorId t : own) {
      const sim::Tensor& tensor = w.tensor(t);
      const bool aliased = tensor.producer == op.id && tensor.in_place_of != sim::kNoTensor;
      if (!aliased) bytes += sim::DeviceArena::aligned_size(tensor.bytes);
      for (const auto& [from, to] : held[index(t)]) {
        if (from <= op.id && op.id <= to)
          bytes -= sim::DeviceArena::aligned_size(tensor.bytes);  // counted as own
      }
    }
    r.base[i] = bytes;
  }
}

// Per op with alternatives on the compute stream, each algorithm's time and workspace over the
// fastest time and the smallest workspace (Relaxation::algorithms).
void cost_algorithms(const sim::Workload& w, Relaxation& r) {
  r.algorithms.assign(w.ops.size(), {});
  for (const sim::Op& op : w.ops) {
    const std::size_t i = index(op.id);
    if (!r.on_compute[i] || op.algorithms.empty()) continue;
    const Bytes least = smallest_workspace(op);
    auto cost = [&](Nanoseconds ns, Bytes workspace) {
      const Bytes aligned = workspace > 0 ? sim::DeviceArena::aligned_size(workspace) : 0;
      r.algorithms[i].push_back({ns - r.min_ns[i], aligned - least});
    };
    cost(op.duration_ns, op.workspace_bytes);
    for (const sim::Algorithm& a : op.algorithms) cost(a.duration_ns, a.workspace_bytes);
  }
}

// An update op's inputs, each once.
std::vector<TensorId> update_inputs(const sim::Op& op) {
  std::vector<TensorId> inputs = op.inputs;
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
  return inputs;
}

// An update op's run on the host stream, as the engine prices a host run: streaming its inputs
// and writing back the parameters and optimizer state (their slots are resident: the tensor's
// home or a device parameter's master copy).
Nanoseconds host_run_ns(const sim::Workload& w, const sim::Machine& machine, const sim::Op& op) {
  Bytes bytes = 0;
  for (TensorId t : update_inputs(op)) {
    const sim::Tensor& tensor = w.tensor(t);
    bytes += sim::is_persistent(tensor.kind) ? 2 * tensor.bytes : tensor.bytes;
  }
  return machine.host_op_ns(bytes);
}

// Whether a gradient an update op reads is written in the step, hence copied out to its host slot
// under a host update.
bool copied_out(const sim::Tensor& t) {
  return t.kind == sim::TensorKind::kGradient && t.producer != sim::kNoOp;
}

}  // namespace

std::vector<UpdateChain> update_chains(const sim::Workload& w, const sim::Machine& machine) {
  std::vector<std::pair<std::vector<UpdateChain>, Nanoseconds>> updates;  // gradients, host run
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kUpdate) continue;
    std::vector<UpdateChain> gradients;
    for (TensorId t : update_inputs(op)) {
      const sim::Tensor& tensor = w.tensor(t);
      if (copied_out(tensor))
        gradients.push_back({tensor.producer, machine.d2h_copy_ns(tensor.bytes)});
    }
    updates.emplace_back(std::move(gradients), host_run_ns(w, machine, op));
  }
  // From the last update back: each gradient's copy-out, then the host stream's updates from the
  // first that reads it on. Per producer, the longest.
  std::map<OpId, Nanoseconds> longest;
  Nanoseconds host_after = 0;
  for (std::size_t k = updates.size(); k-- > 0;) {
    host_after = sim::add_ns(host_after, updates[k].second);
    for (const UpdateChain& g : updates[k].first) {
      Nanoseconds& after = longest[g.producer];
      after = std::max(after, sim::add_ns(g.after_ns, host_after));
    }
  }
  std::vector<UpdateChain> chains;
  chains.reserve(longest.size());
  for (const auto& [producer, after] : longest) chains.push_back({producer, after});
  return chains;
}

namespace {

// The floor of plans that update on the host: the compute stream's work, and the host stream's
// updates in order, each after its gradients' copy-outs (every gradient an update op reads is on
// the host), each taking its host run (update_chains).
Nanoseconds host_update_floor(const sim::Workload& w, const sim::Machine& machine,
                              const Relaxation& r) {
  Nanoseconds floor = std::max(r.busy_ns, host_update_work(w, machine).host_ns);
  for (const UpdateChain& c : update_chains(w, machine))
    floor = std::max(floor, sim::add_ns(r.end_ns[index(c.producer)], c.after_ns));
  return floor;
}

}  // namespace

HostUpdateWork host_update_work(const sim::Workload& w, const sim::Machine& machine) {
  HostUpdateWork work;
  std::vector<TensorId> gradients;
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kUpdate) continue;
    work.host_ns = sim::add_ns(work.host_ns, host_run_ns(w, machine, op));
    for (TensorId t : update_inputs(op)) {
      if (copied_out(w.tensor(t))) gradients.push_back(t);
    }
  }
  std::sort(gradients.begin(), gradients.end());
  gradients.erase(std::unique(gradients.begin(), gradients.end()), gradients.end());
  for (TensorId g : gradients)
    work.copy_out_ns = sim::add_ns(work.copy_out_ns, machine.d2h_copy_ns(w.tensor(g).bytes));
  return work;
}

Relaxation relax(const sim::Workload& w, const sim::Machine& machine,
                 const EncodingOptions& encodings, bool host_placement, bool host_update,
                 const IdealRun& ideal, TimeOrigin origin) {
  Relaxation r;
  r.origin = origin;
  r.host_update = host_update;
  time_ops(w, ideal, r);
  const std::vector<std::vector<OpId>> uses = device_uses(w, r);
  Intervals held(w.tensors.size());
  relax_maps(w, machine, encodings, uses, r, held);
  std::vector<bool> placeable(w.tensors.size(), false);
  if (host_placement) relax_host_tensors(w, machine, uses, r, placeable);
  keep_inputs(w, uses, placeable, r);
  for (const sim::Tensor& t : w.tensors) {
    const auto& u = uses[index(t.id)];
    if (u.empty() || placeable[index(t.id)] || !held[index(t.id)].empty()) continue;
    // Everything else is held from its producer (or the step's start) to its last device use;
    // parameters and optimizer state on the device are never freed.
    const OpId from = t.producer == sim::kNoOp ? sim::OpId{0} : u.front();
    const OpId to = sim::is_persistent(t.kind)
                        ? sim::op_id(static_cast<std::int64_t>(w.ops.size() - 1))
                        : u.back();
    held[index(t.id)].emplace_back(from, to);
  }
  count_base(w, held, r);
  cost_algorithms(w, r);
  if (origin == TimeOrigin::kComputeStart) {
    r.floor_ns = r.busy_ns;
  } else {
    r.floor_ns = host_update ? host_update_floor(w, machine, r) : ideal.iteration_ns;
  }
  return r;
}

Relaxation until(const Relaxation& r, OpId q) {
  Relaxation out = r;
  const std::size_t last = index(q);
  const Nanoseconds after = r.tail_ns[last + 1];
  for (std::size_t i = 0; i < out.tail_ns.size(); ++i)
    out.tail_ns[i] = i <= last ? r.tail_ns[i] - after : 0;
  for (std::size_t i = last + 1; i < out.min_ns.size(); ++i) {
    out.on_compute[i] = false;
    out.min_ns[i] = 0;
    out.algorithms[i].clear();
  }
  out.busy_ns = r.busy_ns - after;
  out.floor_ns = std::max(r.end_ns[last], out.busy_ns);
  std::erase_if(out.absences, [&](const Absence& a) { return a.first > q; });
  for (Absence& a : out.absences) {
    a.writeback_ns = 0;
    if (a.next <= q) continue;
    Absence free;  // back after q: away at no cost until then
    free.tensor = a.tensor;
    free.bytes = a.bytes;
    free.first = a.first;
    free.last = std::min(a.last, q);
    free.next = a.next;
    free.copy = true;
    a = std::move(free);
  }
  return out;
}

}  // namespace memplan::search
