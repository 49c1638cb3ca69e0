// Note [Sizes from allocations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A step recorded without shapes (torch.profiler's default, record_shapes=False) imports as ops
// with their times and no tensors. What its memory did is still known where the allocator's
// history was recorded, in the trace's own addressed `[memory]` events (profile_memory=True) or in
// a CUDA memory snapshot of the same run (torch.cuda.memory._record_memory_history): each
// allocation's size, when it was made and when it was freed (importers/allocation_history.hpp).
// Those give the step its tensors:
//  - each allocation goes to the op that was running on the compute stream when it was made or
//    freed: of the step's compute-stream ops, the one whose event started last at or before that
//    time (glue between ops belongs to the op before it, as the importer folds it; an autograd
//    node on its own thread started after the main thread's enclosing call). An event before the
//    first op goes to the first;
//  - made and freed inside one op: scratch memory, the op's workspace (the most such allocations
//    held at once, replacing what measure_workspace found);
//  - made by op A, freed by a later op B: a tensor A produces and B reads, B its last reader; made
//    by A and alive when the step ends: read by the step's last op, so that it lives to the end;
//    an activation when A is a forward op, a gradient when a backward op, a workspace tensor when
//    the update;
//  - made before the step and freed by op B: an input that B reads last; made before the step and
//    alive after it: held throughout (a parameter: resident, never freed), as is what the
//    history's running total says was held but no allocation accounts for; the step's first op
//    reads each (the engine places the pre-existing tensors that some op reads).
// Sizes are the allocations' (the requested bytes a snapshot records; the allocator's 512-byte
// blocks for `[memory]` events), so the in-core replay follows the recorded memory op by op: what
// it cannot see is the order of allocations and frees inside an op (the engine allocates an op's
// outputs and workspace before it runs and frees after), which can only raise its peak above the
// recorded one. Which ops read a tensor between its allocation and its free is not recorded:
// every tensor made here is lifetime_only (core/workload.hpp), simulated exactly and left alone by
// every plan.
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

TensorKind kind_made_in(sim::Phase phase) {
  switch (phase) {
    case sim::Phase::kForward:
      return TensorKind::kActivation;
    case sim::Phase::kBackward:
      return TensorKind::kGradient;
    case sim::Phase::kUpdate:
      break;
  }
  return TensorKind::kWorkspace;
}

TensorId add_lifetime_tensor(sim::Workload& w, std::string name, TensorKind kind, Bytes bytes,
                             OpId producer) {
  sim::Tensor t;
  t.id = sim::tensor_id(w.tensors.size());
  t.name = std::move(name);
  t.kind = kind;
  t.bytes = bytes;
  t.producer = producer;
  t.lifetime_only = true;
  if (producer != sim::kNoOp) w.ops[index(producer)].outputs.push_back(t.id);
  w.tensors.push_back(std::move(t));
  return w.tensors.back().id;
}

Bytes highest(std::vector<std::pair<Nanoseconds, Bytes>> changes, Bytes start) {
  std::sort(changes.begin(), changes.end());
  Bytes level = start;
  Bytes high = start;
  for (const auto& [t, bytes] : changes)
    high = std::max(high, level = saturating_add(level, bytes));
  return high;
}

bool StepBuilder::size_from_allocations(const AllocationHistory& history) {
  const Nanoseconds step_start = report_.step.start_ns;
  const Nanoseconds step_end = report_.step.end_ns;
  const auto inside = [&](std::optional<Nanoseconds> t) {
    return t && *t >= step_start && *t < step_end;
  };
  const auto in_step = static_cast<std::size_t>(
      std::count_if(history.allocations.begin(), history.allocations.end(),
                    [&](const Allocation& a) { return inside(a.alloc_ns) || inside(a.free_ns); }));
  const OpClock clock(units_, trace_, workload_);
  if (in_step == 0 || clock.starts.empty()) return false;
  const OpId first = clock.first();
  const OpId last = clock.last();
  auto add = [&](std::string name, TensorKind kind, Bytes bytes, OpId producer) {
    return add_lifetime_tensor(workload_, std::move(name), kind, bytes, producer);
  };
  // Per op: its scratch allocations as (time, +bytes) and (time, -bytes).
  std::map<OpId, std::vector<std::pair<Nanoseconds, Bytes>>> scratch;
  std::map<OpId, int> made;  // allocations per producing op, for names
  // The recorded live bytes over the step: at its start, then each change inside it.
  Bytes live = history.held_throughout;
  std::vector<std::pair<Nanoseconds, Bytes>> changes;
  for (const Allocation& a : history.allocations) {
    if (a.bytes <= 0) continue;
    if ((a.free_ns && *a.free_ns < step_start) || (a.alloc_ns && *a.alloc_ns >= step_end)) continue;
    const bool before = !a.alloc_ns || *a.alloc_ns < step_start;
    const bool after = !a.free_ns || *a.free_ns >= step_end;
    if (before) live = saturating_add(live, a.bytes);
    if (!before) changes.emplace_back(*a.alloc_ns, a.bytes);
    if (!after) changes.emplace_back(*a.free_ns, -a.bytes);
    if (before && after) {
      add_input(first, add(fmt::format("held@{:#x}", a.addr), TensorKind::kParameter, a.bytes,
                           sim::kNoOp));
      continue;
    }
    if (before) {
      const TensorId t =
          add(fmt::format("before-step@{:#x}", a.addr), TensorKind::kInput, a.bytes, sim::kNoOp);
      add_input(clock.at(*a.free_ns), t);
      continue;
    }
    const OpId producer = clock.at(*a.alloc_ns);
    const OpId reader = after ? last : std::max(producer, clock.at(*a.free_ns));
    if (!after && reader == producer) {
      scratch[producer].emplace_back(*a.alloc_ns, a.bytes);
      scratch[producer].emplace_back(*a.free_ns, -a.bytes);
      continue;
    }
    const TensorId t = add(fmt::format("{}/alloc{}", op(producer).name, ++made[producer]),
                           kind_made_in(op(producer).phase), a.bytes, producer);
    if (reader != producer) add_input(reader, t);
  }
  if (history.held_throughout > 0) {
    add_input(first, add("held before the trace", TensorKind::kParameter, history.held_throughout,
                         sim::kNoOp));
  }
  // Workspace: the most scratch an op held at once.
  for (const auto& [_, o] : clock.starts) op(o).workspace_bytes = 0;
  for (auto& [o, events] : scratch) op(o).workspace_bytes = highest(std::move(events), 0);
  const Bytes peak = highest(std::move(changes), live);
  report_.sizes_from = history.source;
  report_.sized_allocations = in_step;
  report_.allocations_peak_bytes = peak;
  return true;
}

}  // namespace memplan::importers::detail
