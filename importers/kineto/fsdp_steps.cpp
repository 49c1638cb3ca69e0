// Note [FSDP in a trace]
// ~~~~~~~~~~~~~~~~~~~~~~
// Under FSDP (FSDP2's fully_shard, FSDP1's FullyShardedDataParallel with its FlatParameter) a
// rank holds only its shard of each parameter (dim 0 split over the ranks, padded; FSDP1 the
// shard of a flat concatenation), of its optimizer state and, after the reduce-scatter, of its
// gradient. The layers read unsharded parameters that an all-gather makes for each unit before its
// forward (FSDP2: an output buffer, `fsdp::all_gather_copy_in` writes this rank's shard into it,
// the collective the others', then `fsdp::split_with_sizes_copy` copies it out into one tensor per
// parameter; FSDP1: the padded unsharded flat parameter, which the parameters view), frees after
// the unit's forward (the reshard; the root is kept for backward), gathers again in backward and
// frees after the unit's backward, when its unsharded gradients are copied into the
// reduce-scatter's input (`fsdp::chunk_cat`) and reduced into a shard (gloo reduces with an
// all-reduce) that the optimizer reads. The shapes the profiler records are the unsharded ones,
// so without this the layers' parameters would be resident at full size.
//
// A step is FSDP's when its events hold FSDP's own (is_fsdp_machinery: `FSDP::` ranges, `fsdp::`
// ops, `FullyShardedDataParallel._*` hooks); those are glue units, so that their copies are no
// layer ops. Then:
//  - the trainable parameters become the rank's shards (ranks: an all-gather's output over its
//    input), with their optimizer state; the update reads them;
//  - what FSDP holds of the gathered parameters and what its collectives use is taken from the
//    allocations, not rebuilt from FSDP's rules: when each buffer is freed depends on FSDP's
//    version and settings (FSDP2 keeps an all-gather's output until the next all-gather, a
//    reduce-scatter's input until the next reduce-scatter; c10d and gloo copy into temporaries),
//    and the trace's addressed `[memory]` events say it. Each allocation made in the step inside
//    FSDP's ranges or a communication op (`c10d::`, `gloo:`, `nccl:`, record_param_comms), on any
//    thread, and not inside a layer op nested in them, is a lifetime_only tensor of its size,
//    named after the collective it serves: the collective it was made in; for a copy-out, the
//    all-gather before it; else the next collective issued (its output or input buffer). That
//    collective produces it, but for FSDP2's copy-out, whose per-parameter tensors the op the copy
//    precedes makes (reading the all-gather's output: the copy is glue before that op). Its last
//    reader is the op running when it was freed (as in Note [Sizes from allocations]); freed inside
//    the collective that made it (gloo's temporaries), or made there and freed with no event (its
//    communication thread let go last: Note [Frees the profiler does not see] in
//    memory_timeline.hpp), with that collective; alive at the step's end, a reduction's buffer is
//    the gradient shard the update reads, anything else is read by the last op. One freed before
//    its collective started (c10d's copy into a temporary) is scratch space of the op then running.
//    These allocations leave the layer ops' workspace;
//  - FSDP1's parameters are views of its FlatParameter: autograd concatenates their gradients
//    into the flat gradient in the views' backward (SplitWithSizesBackward0, a backward node of no
//    layer op); what it allocates is made by the op it is folded into and read by the next
//    reduction;
//  - a layer op that reads a parameter reads instead the tensors of the latest all-gather that
//    holds its shard (FSDP2: its copy-in lists the shards' sizes) and were allocated when the op
//    started, and that all-gather reads the shard: forward and backward each read their own
//    gather;
//  - each unsharded gradient is read by the op that copies it into its reduction's input (the op
//    running when a buffer of the collective's input size was allocated for it, FSDP2's
//    chunk_cat, FSDP1's concatenation), else by the first gradient reduction (a reduce-scatter,
//    or the all-reduce gloo runs in its place) issued after the backward op that wrote it; not by
//    the update.
// Without addressed `[memory]` events (the 2021 format) only the shards and the gradients' reads
// change: the gathered memory is not modelled. Left out: FSDP's mixed-precision copies (they are
// allocations like any other, but the layers' parameters keep the recorded dtype), CPU offload.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "importers/kineto/allocation_tensors.hpp"
#include "importers/kineto/comm_args.hpp"
#include "importers/kineto/memory_timeline.hpp"
#include "importers/kineto/saturating_add.hpp"
#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

using sim::Bytes;
using sim::Nanoseconds;
using sim::OpId;
using sim::TensorId;
using sim::TensorKind;

struct StepBuilder::CollectiveMemory {
  TensorId tensor = sim::kNoTensor;
  OpId collective = sim::kNoOp;  // the collective it serves (its producer, but for a copy-out)
  Nanoseconds alloc_ns = 0;
  Nanoseconds free_ns = 0;  // the step's end when alive then
};

namespace {

// Where FSDP or a collective works: its ranges and ops, c10d's ops, the libraries' ops.
bool is_comm_op(std::string_view name) {
  return starts_with(name, "c10d::") || starts_with(name, "gloo:") || starts_with(name, "nccl:") ||
         name == kParamComms;
}

bool is_comm_site(std::string_view name) {
  return is_fsdp_machinery(name) || is_comm_op(name);
}

// The innermost CPU event of a thread that holds a time.
class EnclosingEvent {
 public:
  EnclosingEvent(const KinetoTrace& trace, const Nesting& nesting)
      : trace_(trace), nesting_(nesting) {
    for (std::size_t i = 0; i < trace.cpu_events.size(); ++i)
      by_thread_[trace.cpu_events[i].thread].push_back(i);
    for (auto& [_, ids] : by_thread_) {
      std::stable_sort(ids.begin(), ids.end(), [&](std::size_t a, std::size_t b) {
        return trace.cpu_events[a].start_ns < trace.cpu_events[b].start_ns;
      });
    }
  }
  [[nodiscard]] std::size_t at(const std::string& thread, Nanoseconds t) const {
    const auto list = by_thread_.find(thread);
    if (list == by_thread_.end()) return kNoEvent;
    const auto& ids = list->second;
    auto it = std::upper_bound(ids.begin(), ids.end(), t, [&](Nanoseconds x, std::size_t i) {
      return x < trace_.cpu_events[i].start_ns;
    });
    if (it == ids.begin()) return kNoEvent;
    // The latest event started by then, or the one of its ancestors that still runs.
    std::size_t e = *std::prev(it);
    while (e != kNoEvent && trace_.cpu_events[e].end_ns() < t) e = nesting_.parent[e];
    return e;
  }

 private:
  const KinetoTrace& trace_;
  const Nesting& nesting_;
  std::unordered_map<std::string, std::vector<std::size_t>> by_thread_;
};

// What an allocation at a time was made for: FSDP's or a collective's work (and which
// collective's, when inside one), or a layer op's own.
struct CommSite {
  bool comm = false;
  bool copy_out = false;       // FSDP2's all-gather copy-out: the all-gather before it
  bool flat_gradient = false;  // FSDP1's flat gradient, made by autograd
  bool in_comm_op = false;     // inside a communication op, not only FSDP's ranges
  OpId collective = sim::kNoOp;
};

CommSite comm_site(const KinetoTrace& trace, const Nesting& nesting, std::size_t event,
                   const std::unordered_map<std::size_t, OpId>& collective_of,
                   const std::set<std::size_t>& layer_events,
                   const std::set<std::size_t>& flat_gradients) {
  CommSite site;
  for (std::size_t e = event; e != kNoEvent; e = nesting.parent[e]) {
    site.flat_gradient = site.flat_gradient || flat_gradients.count(e) > 0;
    site.comm = site.comm || site.flat_gradient;
    if (const auto c = collective_of.find(e); c != collective_of.end()) {
      site.comm = site.in_comm_op = true;
      site.collective = c->second;
      break;
    }
    if (!site.comm && layer_events.count(e) > 0) return site;  // a layer op's own memory
    const std::string& name = trace.cpu_events[e].name;
    site.comm = site.comm || is_comm_site(name);
    site.in_comm_op = site.in_comm_op || is_comm_op(name);
    site.copy_out = site.copy_out || name.find("all_gather_copy_out") != std::string::npos;
  }
  return site;
}

}  // namespace

std::string StepBuilder::fsdp_kind() const {
  std::string kind;
  for (const CpuEvent& e : trace_.cpu_events) {
    if (e.start_ns < report_.step.start_ns || e.start_ns >= report_.step.end_ns ||
        !is_fsdp_machinery(e.name))
      continue;
    if (starts_with(e.name, "FSDP::") || starts_with(e.name, "fsdp::"))
      return "FSDP2 (fully_shard)";
    kind = "FSDP1 (FlatParameter)";
  }
  return kind;
}

bool StepBuilder::shard_for_fsdp() {
  if (time_only_) return false;
  std::string kind = fsdp_kind();
  if (kind.empty()) return false;
  std::vector<OpId> reductions;
  std::int64_t ranks = 0;
  std::size_t gathers = 0;
  for (const sim::Op& o : workload_.ops) {
    if (!o.collective) continue;
    const sim::Collective& c = *o.collective;
    if (c.kind == sim::CollectiveKind::kAllGather) {
      ++gathers;
      if (ranks == 0 && c.in_bytes > 0) ranks = c.out_bytes / c.in_bytes;
    } else if (c.kind == sim::CollectiveKind::kReduceScatter ||
               c.kind == sim::CollectiveKind::kAllReduce) {
      if (o.phase == sim::Phase::kBackward) reductions.push_back(o.id);
    }
  }
  if (ranks < 2) return false;  // nothing sharded: no all-gather of parameters
  report_.fsdp = std::move(kind);
  report_.fsdp_shards = ranks;
  report_.fsdp_gathers = gathers;
  report_.fsdp_reductions = reductions.size();
  shard_parameters(ranks);
  const std::vector<CollectiveMemory> memory = collective_memory();
  report_.fsdp_tensors = memory.size();
  for (const CollectiveMemory& m : memory) {
    if (op(m.collective).collective->kind == sim::CollectiveKind::kAllGather)
      gather_memory_[m.collective].push_back(m.tensor);
  }
  read_gathered(memory);
  route_gradients(reductions);
  return true;
}

void StepBuilder::route_gradients(const std::vector<OpId>& reductions) {
  if (roles_.persistent_grads || reductions.empty()) return;
  sim::Op* update = nullptr;
  for (sim::Op& o : workload_.ops) {
    if (o.phase == sim::Phase::kUpdate && !o.collective) update = &o;
  }
  for (TensorId p : trainable_) {
    const auto g = param_grad_.find(p);
    if (g == param_grad_.end()) continue;
    const OpId made = tensor(g->second).producer;
    const auto r = std::upper_bound(reductions.begin(), reductions.end(), made);
    if (r == reductions.end()) continue;
    // Read by the copy into the reduction's input where the trace shows one, else by it.
    const auto copy = copy_in_.find(*r);
    add_input(copy != copy_in_.end() && copy->second > made ? copy->second : *r, g->second);
    if (update != nullptr) std::erase(update->inputs, g->second);
  }
}

namespace {

// The memory events of each thread of a device, in time order.
class ThreadMemory {
 public:
  ThreadMemory(const KinetoTrace& trace, std::int64_t device) : trace_(trace) {
    for (std::size_t i = 0; i < trace.memory_events.size(); ++i) {
      if (trace.memory_events[i].device_type == device)
        by_thread_[trace.memory_events[i].thread].push_back(i);
    }
  }
  // The most `e`'s thread held above its start while it ran, less what it kept, leaving out the
  // events in `skip` (by address and time): measure_workspace's rule.
  [[nodiscard]] Bytes scratch(const CpuEvent& e,
                              const std::set<std::pair<std::int64_t, Nanoseconds>>& skip) const {
    const auto list = by_thread_.find(e.thread);
    if (list == by_thread_.end()) return 0;
    const auto& ids = list->second;
    const auto& memory = trace_.memory_events;
    auto it = std::lower_bound(ids.begin(), ids.end(), e.start_ns,
                               [&](std::size_t m, Nanoseconds t) { return memory[m].time_ns < t; });
    Bytes level = 0;
    Bytes high = 0;
    for (; it != ids.end() && memory[*it].time_ns < e.end_ns(); ++it) {
      const MemoryEvent& m = memory[*it];
      if (m.addr && skip.count({*m.addr, m.time_ns}) > 0) continue;
      level = saturating_add(level, m.bytes);
      high = std::max(high, level);
    }
    return std::max<Bytes>(0, high - std::max<Bytes>(0, level));
  }

 private:
  const KinetoTrace& trace_;
  std::unordered_map<std::string, std::vector<std::size_t>> by_thread_;
};

// The collective an allocation at `t` serves, of `issued` (collectives by their event's start):
// for a copy-out the all-gather before it, else the next collective issued (else the last).
OpId served_collective(const sim::Workload& w,
                       const std::vector<std::pair<Nanoseconds, OpId>>& issued, Nanoseconds t,
                       bool copy_out) {
  const auto next = std::lower_bound(issued.begin(), issued.end(), t,
                                     [](const auto& c, Nanoseconds x) { return c.first < x; });
  if (!copy_out) return next != issued.end() ? next->second : issued.back().second;
  for (auto it = next; it != issued.begin();) {
    --it;
    if (w.op(it->second).collective->kind == sim::CollectiveKind::kAllGather) return it->second;
  }
  return issued.front().second;
}

// The op an FSDP2 copy-out at `t` of `gather`'s output makes the unit's parameters for: the first
// compute-stream op issued after the gather that starts at `t` or later (the copy is glue before
// it), with its start; else the gather itself (no start).
std::pair<OpId, Nanoseconds> copy_out_op(const OpClock& clock, OpId gather, Nanoseconds t) {
  auto it = std::lower_bound(clock.starts.begin(), clock.starts.end(), t,
                             [](const auto& s, Nanoseconds x) { return s.first < x; });
  for (; it != clock.starts.end(); ++it) {
    if (it->second > gather) return {it->second, it->first};
  }
  return {gather, t};
}

// The step's collectives by their events: which event is which collective, when each started
// and ended, in issue order, and the events of the other ops (a layer's own memory).
struct StepCollectives {
  std::unordered_map<std::size_t, OpId> of_event;
  std::unordered_map<OpId, std::pair<Nanoseconds, Nanoseconds>> span;
  std::vector<std::pair<Nanoseconds, OpId>> issued;
  std::set<std::size_t> layer_events;
  std::set<std::size_t> flat_gradients;  // FSDP1: the flat parameter's views' backward

  StepCollectives(const KinetoTrace& trace, const std::vector<Unit>& units, bool flat) {
    for (const Unit& u : units) {
      if (flat && u.op == sim::kNoOp && u.role == Unit::Role::kBackward &&
          backward_node(trace.cpu_events[u.event].name) == "SplitWithSizesBackward0")
        flat_gradients.insert(u.event);
      if (u.op == sim::kNoOp) continue;
      const CpuEvent& e = trace.cpu_events[u.event];
      if (u.role != Unit::Role::kCollective) {
        layer_events.insert(u.event);
        continue;
      }
      of_event.emplace(u.event, u.op);
      span.emplace(u.op, std::pair{e.start_ns, e.end_ns()});
      issued.emplace_back(e.start_ns, u.op);
    }
    std::stable_sort(issued.begin(), issued.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
};

using EventKeys = std::set<std::pair<std::int64_t, Nanoseconds>>;  // address, time
using Scratch = std::map<OpId, std::vector<std::pair<Nanoseconds, Bytes>>>;

// Each op's workspace without the memory events in `skip` (FSDP's and the collectives'), or the
// most of `scratch` it held at once, whichever is more.
void leave_workspace(const KinetoTrace& trace, std::int64_t device, const std::vector<Unit>& units,
                     const EventKeys& skip, Scratch& scratch, sim::Workload& w) {
  const ThreadMemory memory(trace, device);
  for (const Unit& u : units) {
    if (u.op == sim::kNoOp || u.role == Unit::Role::kCollective) continue;
    const Bytes left_out =
        u.workspace - std::min(u.workspace, memory.scratch(trace.cpu_events[u.event], skip));
    Bytes& workspace = w.ops[index(u.op)].workspace_bytes;
    workspace = std::max<Bytes>(0, workspace - left_out);
    if (auto s = scratch.find(u.op); s != scratch.end())
      workspace = std::max(workspace, highest(std::move(s->second), 0));
  }
}

}  // namespace

// The first tensor `collective` produced itself and held at `t` (what a copy-out then reads),
// else none.
TensorId StepBuilder::collective_output(const std::vector<CollectiveMemory>& memory,
                                        OpId collective, Nanoseconds t) const {
  for (const CollectiveMemory& m : memory) {
    if (m.collective == collective && tensor(m.tensor).producer == collective && m.free_ns >= t)
      return m.tensor;
  }
  return sim::kNoTensor;
}

std::vector<StepBuilder::CollectiveMemory> StepBuilder::collective_memory() {
  const std::int64_t device = report_.gpu ? 1 : 0;
  const auto allocations = pair_allocations(trace_.memory_events, device);
  const OpClock clock(units_, trace_, workload_);
  if (!allocations || clock.starts.empty()) return {};
  const StepCollectives collectives(trace_, units_, starts_with(report_.fsdp, "FSDP1"));
  if (collectives.issued.empty()) return {};
  const auto update = std::find_if(workload_.ops.begin(), workload_.ops.end(), [](const auto& o) {
    return o.phase == sim::Phase::kUpdate && !o.collective;
  });
  const OpId reads_shards = update != workload_.ops.end() ? update->id : clock.last();
  const EnclosingEvent enclosing(trace_, nesting_);
  const Nanoseconds start = report_.step.start_ns;
  const Nanoseconds end = report_.step.end_ns;
  EventKeys skip;  // their events leave the workspace
  std::map<OpId, int> made;
  Scratch scratch;
  std::vector<CollectiveMemory> out;
  for (const Allocation& a : *allocations) {
    const bool made_in = a.alloc_ns && *a.alloc_ns >= start && *a.alloc_ns < end;
    const bool freed_in = a.free_ns && *a.free_ns >= start && *a.free_ns < end;
    if (!made_in && !freed_in) continue;
    const CommSite site =
        comm_site(trace_, nesting_, enclosing.at(a.thread, made_in ? *a.alloc_ns : *a.free_ns),
                  collectives.of_event, collectives.layer_events, collectives.flat_gradients);
    if (!site.comm) continue;
    if (a.alloc_ns) skip.emplace(a.addr, *a.alloc_ns);
    if (a.free_ns) skip.emplace(a.addr, *a.free_ns);
    if (!made_in || a.bytes <= 0) continue;
    const OpId collective =
        site.collective != sim::kNoOp
            ? site.collective
            : served_collective(workload_, collectives.issued, *a.alloc_ns, site.copy_out);
    const auto [issued_at, ended_at] = collectives.span.at(collective);
    if (site.collective == sim::kNoOp && freed_in && *a.free_ns <= issued_at) {
      // Freed before its collective started (c10d's copy into a temporary): scratch space of
      // the op then running.
      scratch[clock.at(*a.alloc_ns)].emplace_back(*a.alloc_ns, a.bytes);
      scratch[clock.at(*a.alloc_ns)].emplace_back(*a.free_ns, -a.bytes);
      continue;
    }
    const sim::Collective& c = *op(collective).collective;
    const bool gather = c.kind == sim::CollectiveKind::kAllGather;
    auto [producer, producer_start] = site.copy_out ? copy_out_op(clock, collective, *a.alloc_ns)
                                                    : std::pair{collective, *a.alloc_ns};
    // FSDP1's flat gradient: made by the op autograd's concatenation is folded into, read by
    // the reduction.
    const bool flat = site.flat_gradient && !gather && clock.at(*a.alloc_ns) < collective;
    if (flat) producer = clock.at(*a.alloc_ns);
    // A reduction's input, made before it: the op then running copies the gradients into it.
    if (!gather && site.collective == sim::kNoOp && *a.alloc_ns < issued_at &&
        a.bytes == allocator_bytes(c.in_bytes, device))
      copy_in_.try_emplace(collective, clock.at(*a.alloc_ns));
    // Made inside a communication op (c10d's ops write into the tensors their caller passes) and
    // freed with no event: the collective's temporary, whose last reference its communication
    // thread dropped (Note [Frees the profiler does not see] in memory_timeline.hpp).
    const bool temporary = site.in_comm_op && (!freed_in || a.free_unrecorded);
    const TensorKind kind =
        !freed_in && !gather && !temporary ? TensorKind::kGradient : TensorKind::kWorkspace;
    const TensorId t = add_lifetime_tensor(
        workload_, fmt::format("{}/alloc{}", op(collective).name, ++made[collective]), kind,
        a.bytes, producer);
    // Freed inside the collective that made it (gloo's temporaries), or a temporary freed unseen:
    // with the collective, whatever the launching thread did meanwhile.
    const bool own =
        temporary || (site.collective != sim::kNoOp && freed_in && *a.free_ns <= ended_at);
    const OpId reader = own        ? producer
                        : freed_in ? clock.at(*a.free_ns)
                                   : (kind == TensorKind::kGradient ? reads_shards : clock.last());
    if (reader > producer) add_input(reader, t);
    if (flat) add_input(collective, t);
    if (const TensorId gathered = collective_output(out, collective, producer_start);
        site.copy_out && producer != collective && gathered != sim::kNoTensor)
      add_input(producer, gathered);  // the copy-out reads the all-gather's output
    out.push_back({t, collective, *a.alloc_ns, temporary ? ended_at : freed_in ? *a.free_ns : end});
  }
  leave_workspace(trace_, device, units_, skip, scratch, workload_);
  return out;
}

void StepBuilder::read_gathered(const std::vector<CollectiveMemory>& memory) {
  if (memory.empty()) return;
  // What each all-gather gathers: the shards' sizes its copy-in lists (FSDP2), else anything.
  std::vector<std::pair<Nanoseconds, std::set<std::size_t>>> copy_ins;
  for (const CpuEvent& e : trace_.cpu_events) {
    if (e.name != "fsdp::all_gather_copy_in" || e.input_lists.empty()) continue;
    std::set<std::size_t> sizes;
    for (const Shape& s : e.input_lists.front()) sizes.insert(numel(s));
    copy_ins.emplace_back(e.start_ns, std::move(sizes));
  }
  std::sort(copy_ins.begin(), copy_ins.end());
  std::unordered_map<OpId, Nanoseconds> started;  // each op's event start
  for (const Unit& u : units_) {
    if (u.op != sim::kNoOp) started.emplace(u.op, event(u).start_ns);
  }
  auto holds = [&](OpId gather, std::size_t shard) {
    const Nanoseconds t = started.at(gather);
    auto it = std::upper_bound(copy_ins.begin(), copy_ins.end(), t,
                               [](Nanoseconds x, const auto& c) { return x < c.first; });
    return it == copy_ins.begin() || std::prev(it)->second.count(shard) > 0;
  };
  const std::set<TensorId> shards(trainable_.begin(), trainable_.end());
  for (sim::Op& o : workload_.ops) {
    const auto at = started.find(o.id);
    if (o.collective || o.phase == sim::Phase::kUpdate || at == started.end()) continue;
    const Nanoseconds t = at->second;
    const std::vector<TensorId> inputs = o.inputs;
    for (TensorId x : inputs) {
      if (shards.count(x) == 0) continue;
      OpId gather = sim::kNoOp;
      for (const CollectiveMemory& m : memory) {
        if (m.collective < o.id && m.alloc_ns <= t && t < m.free_ns &&
            op(m.collective).collective->kind == sim::CollectiveKind::kAllGather &&
            (gather == sim::kNoOp || m.collective > gather) &&
            holds(m.collective, numel(tensor(x).shape)))
          gather = m.collective;
      }
      if (gather == sim::kNoOp) continue;
      shard_reads_[o.id].push_back(x);
      std::erase(o.inputs, x);
      for (const CollectiveMemory& m : memory) {
        // What the op made itself (a copy-out before it) is its output, not an input.
        if (m.collective == gather && m.alloc_ns <= t && t < m.free_ns &&
            tensor(m.tensor).producer < o.id)
          add_input(o.id, m.tensor);
      }
      add_input(gather, x);
    }
  }
}

}  // namespace memplan::importers::detail
