#include "importers/kineto/collective_units.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include "importers/kineto/comm_args.hpp"

// Note [Collectives of a step]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A collective is what c10d issues for one torch.distributed call (the all-reduce of a DDP
// bucket, the all-to-all of an embedding's lookups). PyTorch records it as a `record_param_comms`
// op (since 2.1 with "Collective name", message sizes, dtype, process group and its ranks; before,
// only its input's shape) around the library's own op (`nccl:all_reduce`, `gloo:broadcast`),
// inside which the collective's kernel is launched on the library's stream. Each outermost such op
// in the step's window, on any thread of the rank, is one collective:
//  - its kind: "Collective name", else the name of the nccl:/gloo: op in it; c10d's bookkeeping
//    (`wait` for work.wait(), the coalescing brackets) is no collective;
//  - its sizes: "In msg nelems" and "Out msg nelems" times the dtype's size (those the kernel
//    carries, in newer Kineto, where the op has none); else the first input's shape and type of
//    the nccl:/gloo: op (or of record_param_comms), the output then the one a c10d `*_base_` op
//    around it records (its first argument), else sized by the kind (all-gather: the input times
//    the group's size, reduce-scatter: divided by it, else the input's);
//  - its kernels: those launched inside it (by correlation or flow, as any kernel), or whose
//    External id is its own (newer Kineto links a collective's kernel to record_param_comms); its
//    duration is their recorded time, its stream theirs (step_units.cpp);
//  - its sequence: its number among its process group's collectives in the step, in the order c10d
//    issued them (their CPU start), which is the same on every rank of the group.

namespace memplan::importers::detail {

namespace {

// The collective an nccl:/gloo: op nested under event `i` names, breadth first.
const CommArgs* nested_library_op(const KinetoTrace& trace, const Nesting& nesting, std::size_t i) {
  std::vector<std::size_t> todo(nesting.children[i].begin(), nesting.children[i].end());
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const CpuEvent& e = trace.cpu_events[todo[k]];
    if (is_library_comm_op(e.name) && e.comm) return &*e.comm;
    todo.insert(todo.end(), nesting.children[todo[k]].begin(), nesting.children[todo[k]].end());
  }
  return nullptr;
}

// The event whose recorded shapes size the collective: the nccl:/gloo: op, else the event.
const CpuEvent& sized_event(const KinetoTrace& trace, const Nesting& nesting, std::size_t i) {
  std::vector<std::size_t> todo{i};
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const CpuEvent& e = trace.cpu_events[todo[k]];
    if (is_library_comm_op(e.name)) return e;
    todo.insert(todo.end(), nesting.children[todo[k]].begin(), nesting.children[todo[k]].end());
  }
  return trace.cpu_events[i];
}

// Elements of the first tensor (or tensor list) argument recorded; InputError past 2^50.
std::int64_t first_input_nelems(const CpuEvent& e, const std::string& where) {
  for (const Shape& s : e.input_dims) {
    if (!s.empty()) return checked_bytes(s, 1, where);
  }
  std::int64_t n = 0;
  if (!e.input_lists.empty()) {
    for (const Shape& s : e.input_lists.front())
      n = std::min(kMaxNelems, n + checked_bytes(s, 1, where));
  }
  return n;
}

// The output a c10d `*_base_` op records as its first argument (alltoall_base_(output, input),
// _allgather_base_, _reduce_scatter_base_): the c10d op around record_param_comms.
std::optional<std::int64_t> base_op_output(const KinetoTrace& trace, const Nesting& nesting,
                                           std::size_t i, const std::string& where) {
  const std::size_t parent = nesting.parent[i];
  if (parent == kNoEvent) return std::nullopt;
  const CpuEvent& p = trace.cpu_events[parent];
  if (!starts_with(p.name, "c10d::") || !ends_with(p.name, "_base_") || dims(p, 0).empty() ||
      dims(p, 1).empty())
    return std::nullopt;
  return checked_bytes(dims(p, 0), 1, where);
}

}  // namespace

std::string c10_dtype(std::string_view name) {
  struct Entry {
    std::string_view c10;
    std::string_view memplan;
  };
  static constexpr std::array<Entry, 12> kNames{{{"Float", "float32"},
                                                 {"Double", "float64"},
                                                 {"Half", "float16"},
                                                 {"BFloat16", "bfloat16"},
                                                 {"Long", "int64"},
                                                 {"Int", "int32"},
                                                 {"Short", "int16"},
                                                 {"Char", "int8"},
                                                 {"Byte", "uint8"},
                                                 {"Bool", "bool"},
                                                 {"Float8_e4m3fn", "float8"},
                                                 {"Float8_e5m2", "float8"}}};
  for (const Entry& e : kNames) {
    if (e.c10 == name) return std::string(e.memplan);
  }
  return {};
}

bool is_comm_event(const KinetoTrace& trace, std::size_t i) {
  const CpuEvent& e = trace.cpu_events[i];
  return e.comm != nullptr && (e.name == kParamComms || is_library_comm_op(e.name));
}

std::optional<sim::CollectiveKind> collective_kind(const KinetoTrace& trace, const Nesting& nesting,
                                                   std::size_t i) {
  if (!is_comm_event(trace, i)) return std::nullopt;
  const CommArgs& c = *trace.cpu_events[i].comm;
  if (!c.collective.empty()) return sim::parse_collective_kind(c.collective);  // nullopt: `wait`
  if (const CommArgs* library = nested_library_op(trace, nesting, i))
    return sim::parse_collective_kind(library->collective);
  return std::nullopt;
}

std::vector<Unit> collect_collectives(const KinetoTrace& trace, const Nesting& nesting,
                                      const StepWindow& step) {
  std::vector<Unit> units;
  for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
    const CpuEvent& e = trace.cpu_events[i];
    if (e.start_ns < step.start_ns || e.start_ns >= step.end_ns) continue;
    if (!collective_kind(trace, nesting, i)) continue;
    bool outermost = true;
    for (std::size_t p = nesting.parent[i]; p != kNoEvent && outermost; p = nesting.parent[p])
      outermost = !is_comm_event(trace, p);
    if (!outermost) continue;
    Unit u;
    u.event = i;
    u.role = Unit::Role::kCollective;
    units.push_back(std::move(u));
  }
  return units;
}

sim::Collective describe_collective(const KinetoTrace& trace, const Nesting& nesting,
                                    const Unit& unit, std::int32_t world_size) {
  const CommArgs& op = *trace.cpu_events[unit.event].comm;
  // The kernel's copy of the arguments stands in for what the op lacks.
  const CommArgs& args = !op.in_nelems && unit.kernel_comm ? *unit.kernel_comm : op;
  sim::Collective c;
  c.kind = *collective_kind(trace, nesting, unit.event);
  const CpuEvent& sized = sized_event(trace, nesting, unit.event);
  c.dtype = c10_dtype(args.dtype);
  if (c.dtype.empty() && !sized.input_types.empty()) c.dtype = dtype_of(sized, 0);
  const sim::Bytes item = sim::dtype_bytes(c.dtype).value_or(4);  // unknown: 4 bytes
  const std::int64_t group = args.group_size.value_or(
      args.group_ranks.empty() ? world_size : static_cast<std::int64_t>(args.group_ranks.size()));
  const std::string where = trace.source + ": " + trace.cpu_events[unit.event].name;
  const std::int64_t in = args.in_nelems.value_or(first_input_nelems(sized, where));
  const std::int64_t parts = std::clamp<std::int64_t>(group, 1, std::int64_t{1} << 24);
  std::int64_t out = in;
  if (args.out_nelems) {
    out = *args.out_nelems;
  } else if (const auto recorded = base_op_output(trace, nesting, unit.event, where)) {
    out = *recorded;
  } else if (c.kind == sim::CollectiveKind::kAllGather) {
    out = in > kMaxNelems / parts ? kMaxNelems : in * parts;
  } else if (c.kind == sim::CollectiveKind::kReduceScatter) {
    out = in / parts;
  }
  c.in_bytes = in * item;  // each at most 2^50 elements (comm_args.cpp) of at most 8 bytes
  c.out_bytes = out * item;
  c.group = args.group.empty() ? op.group : args.group;
  c.ranks = !op.group_ranks.empty() ? op.group_ranks : args.group_ranks;
  const std::optional<std::int64_t> peer = op.peer ? op.peer : args.peer;
  if (peer) c.peer = static_cast<std::int32_t>(*peer);
  if (!peer && sized.comm && sized.comm->peer)
    c.peer = static_cast<std::int32_t>(*sized.comm->peer);
  return c;
}

}  // namespace memplan::importers::detail
