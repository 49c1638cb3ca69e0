#include "core/workload.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"
#include "core/workload_graph.hpp"

namespace memplan::sim {
namespace {

constexpr std::array<std::string_view, kPhaseCount> kPhaseNames{"forward", "backward", "update"};
constexpr std::array<std::string_view, kTensorKindCount> kKindNames{
    "activation", "parameter", "gradient", "optimizer_state", "workspace", "input"};

// Limits that separate a plausible trace from a corrupt one. A single tensor or workspace over
// 1 PiB, or a single op running for over an hour, is taken as an error in the file.
constexpr Bytes kMaxTensorBytes = Bytes{1} << 50;
constexpr Nanoseconds kMaxOpDuration = Nanoseconds{3600} * kNanosecondsPerSecond;
// The largest job a trace may describe (trace format v3 `distributed.world_size`).
constexpr std::int32_t kMaxWorldSize = std::int32_t{1} << 20;

[[noreturn]] void fail(std::string_view source, const std::string& path, const std::string& what) {
  throw InputError(fmt::format("{}: {}", source, path), what);
}

std::string op_label(const Op& op) {
  return fmt::format("op {} '{}'", op.id, op.name);
}

// The device's values, in the ranges the what-if flags take (core/units.hpp), so that a trace
// cannot ask for what a flag may not: a link of 1e-6 B/s prices a copy at centuries.
void validate_device(const DeviceInfo& d, std::string_view source) {
  if (d.memory_bytes < 0 || d.memory_bytes > kMaxBytes) {
    fail(source, "$.device.memory_bytes",
         fmt::format("{} is out of range (0 to 1 EiB)", d.memory_bytes));
  }
  const std::array<std::pair<const char*, std::optional<BytesPerSecond>>, 3> bandwidths{
      {{"h2d_bytes_per_s", d.link.h2d_bytes_per_s},
       {"d2h_bytes_per_s", d.link.d2h_bytes_per_s},
       {"memory_bandwidth_bytes_per_s", d.memory_bandwidth_bytes_per_s}}};
  for (const auto& [key, value] : bandwidths) {
    if (value && !(*value >= 1.0 && *value <= 1e18)) {
      fail(source, fmt::format("$.device.{}", key),
           fmt::format("{:g} is out of range (1 B/s to 1 EB/s)", *value));
    }
  }
}

// Sums over the whole step in range: every tensor and workspace live at once stays below
// kMaxBytes, and the ops' times below kMaxStepNanoseconds (the engine saturates beyond, sim/units).
void validate_totals(const Workload& w, std::string_view source) {
  constexpr Nanoseconds kMaxStepNanoseconds = Nanoseconds{1} << 52;  // 52 days
  Bytes bytes = 0;
  for (const Tensor& t : w.tensors) bytes = std::min(bytes + t.bytes, kMaxBytes + 1);
  Nanoseconds time = 0;
  for (const Op& op : w.ops) {
    Bytes workspace = op.workspace_bytes;
    Nanoseconds duration = op.duration_ns;
    for (const Algorithm& a : op.algorithms) {
      workspace = std::max(workspace, a.workspace_bytes);
      duration = std::max(duration, a.duration_ns);
    }
    bytes = std::min(bytes + workspace, kMaxBytes + 1);  // each term at most 2^50: no overflow
    time = std::min(time + duration, kMaxStepNanoseconds + 1);  // each at most an hour
  }
  if (bytes > kMaxBytes) {
    fail(source, "$.tensors", "the tensors and workspaces add up to over 1 EiB");
  }
  if (time > kMaxStepNanoseconds) {
    fail(source, "$.ops", "the ops' durations add up to over 2^52 ns (52 days)");
  }
}

void validate_tensors(const Workload& w, std::string_view source) {
  const std::size_t op_count = w.ops.size();
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    const Tensor& t = w.tensors[i];
    const std::string at = fmt::format("$.tensors[{}]", i);
    if (t.id != tensor_id(i)) {
      fail(source, at + ".id",
           fmt::format("id {} where {} was expected (tensor ids are their positions in the list; "
                       "a duplicate or skipped id breaks that)",
                       t.id, i));
    }
    if (t.bytes < 0) fail(source, at + ".bytes", fmt::format("negative size {}", t.bytes));
    if (t.bytes > kMaxTensorBytes) {
      fail(source, at + ".bytes", fmt::format("absurd size {} bytes (over 1 PiB)", t.bytes));
    }
    if (!t.shape.empty()) {
      Bytes elements = 1;
      for (std::size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0) {
          fail(source, fmt::format("{}.shape[{}]", at, d),
               fmt::format("negative extent {}", t.shape[d]));
        }
        if (t.shape[d] != 0 && elements > kMaxTensorBytes / t.shape[d]) {
          fail(source, at + ".shape", "absurd shape (more than 2^50 elements)");
        }
        elements *= t.shape[d];
      }
      if (auto item = dtype_bytes(t.dtype); item && elements * *item != t.bytes) {
        fail(source, at + ".bytes",
             fmt::format("{} bytes, but shape [{}] of {} needs {}", t.bytes,
                         fmt::join(t.shape, ", "), t.dtype, elements * *item));
      }
    }
    if (t.producer != kNoOp && index(t.producer) >= op_count) {
      fail(source, at + ".producer", fmt::format("unknown op id {}", t.producer));
    }
    if (t.producer != kNoOp && is_persistent(t.kind)) {
      fail(
          source, at + ".producer",
          fmt::format("tensor '{}' is a {}, which exists before the step, yet names producer op {}",
                      t.name, to_string(t.kind), t.producer));
    }
    if (t.producer != kNoOp) {
      const auto& outs = w.op(t.producer).outputs;
      if (std::find(outs.begin(), outs.end(), t.id) == outs.end()) {
        fail(source, at + ".producer",
             fmt::format("names {} as producer, but that op does not list tensor {} in its outputs",
                         op_label(w.op(t.producer)), t.id));
      }
    }
  }
}

// An op's list of tensor ids (`field` of the op at `at`): every id known, none twice. Linear in
// the list's length: an update op may read tens of thousands of tensors.
void check_tensor_refs(const Workload& w, std::string_view source, const std::string& at,
                       const std::vector<TensorId>& refs, std::string_view field) {
  const std::size_t tensor_count = w.tensors.size();
  std::unordered_set<TensorId> seen;
  seen.reserve(refs.size());
  for (std::size_t k = 0; k < refs.size(); ++k) {
    if (index(refs[k]) >= tensor_count) {  // -1 included
      fail(source, fmt::format("{}.{}[{}]", at, field, k),
           fmt::format("unknown tensor id {}", refs[k]));
    }
    if (!seen.insert(refs[k]).second) {
      fail(source, fmt::format("{}.{}[{}]", at, field, k),
           fmt::format("tensor {} listed twice", refs[k]));
    }
  }
}

// An op reads only tensors that exist before the step or that an op produces, and writes only
// tensors that name it as their producer.
void check_op_dataflow(const Workload& w, std::string_view source, const std::string& at,
                       const Op& op) {
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const Tensor& t = w.tensor(op.inputs[k]);
    if (t.producer == kNoOp && !is_preexisting(t.kind)) {
      fail(source, fmt::format("{}.inputs[{}]", at, k),
           fmt::format("{} reads {} tensor {} '{}' that no op produces", op_label(op),
                       to_string(t.kind), t.id, t.name));
    }
  }
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const Tensor& t = w.tensor(op.outputs[k]);
    if (t.producer != op.id) {
      fail(source, fmt::format("{}.outputs[{}]", at, k),
           fmt::format(
               "writes tensor {} '{}', whose producer is {}", t.id, t.name,
               t.producer == kNoOp ? std::string("none") : fmt::format("op {}", t.producer)));
    }
  }
}

// The workspace and duration of an op or one of its algorithms (at `where`) are plausible.
void check_op_cost(std::string_view source, Bytes workspace, Nanoseconds duration,
                   const std::string& where) {
  if (workspace < 0)
    fail(source, where + ".workspace_bytes", fmt::format("negative size {}", workspace));
  if (workspace > kMaxTensorBytes) {
    fail(source, where + ".workspace_bytes",
         fmt::format("absurd size {} bytes (over 1 PiB)", workspace));
  }
  if (duration < 0)
    fail(source, where + ".duration_ns", fmt::format("negative duration {}", duration));
  if (duration > kMaxOpDuration) {
    fail(source, where + ".duration_ns",
         fmt::format("absurd duration {} ns (over an hour)", duration));
  }
}

// The window attributes of a convolution or pooling (FORMAT.md, `attributes`), wherever they
// appear: whole numbers, at least 1 (kernel, stride, dilation, groups) or 0 (padding), below 2^31
// as the backends take them. A kernel, stride or groups of 0 would otherwise pass until a backend
// ran the op.
void check_op_attributes(std::string_view source, const std::string& at, const Op& op) {
  static constexpr std::array<std::pair<std::string_view, double>, 5> kLeast{
      {{"kernel", 1}, {"stride", 1}, {"dilation", 1}, {"groups", 1}, {"padding", 0}}};
  for (const auto& [name, least] : kLeast) {
    const auto it = op.attributes.find(name);
    if (it == op.attributes.end()) continue;
    for (std::size_t k = 0; k < it->second.size(); ++k) {
      const double v = it->second[k];
      if (v >= least && v < 2147483648.0 && v == std::floor(v)) continue;
      fail(source,
           fmt::format("{}.attributes.{}{}", at, name,
                       it->second.size() == 1 ? std::string() : fmt::format("[{}]", k)),
           fmt::format("{} {:g}: expected a whole number of at least {} (the op's window)", name, v,
                       least));
    }
  }
}

// The op's costs: its workspace and duration and its algorithms', its flops and bytes moved.
void check_op_costs(std::string_view source, const std::string& at, const Op& op) {
  check_op_cost(source, op.workspace_bytes, op.duration_ns, at);
  for (std::size_t a = 0; a < op.algorithms.size(); ++a) {
    check_op_cost(source, op.algorithms[a].workspace_bytes, op.algorithms[a].duration_ns,
                  fmt::format("{}.algorithms[{}]", at, a));
  }
  if (op.flops && (*op.flops < 0 || !std::isfinite(*op.flops))) {
    fail(source, at + ".flops", fmt::format("{} is not a non-negative count", *op.flops));
  }
  if (op.bytes_moved && (*op.bytes_moved < 0 || *op.bytes_moved > kMaxTensorBytes * 1024)) {
    fail(source, at + ".bytes_moved", fmt::format("implausible {}", *op.bytes_moved));
  }
}

// A backward op differentiates a known forward op.
void check_differentiates(const Workload& w, std::string_view source, const std::string& at,
                          const Op& op) {
  if (op.differentiates == kNoOp) return;
  const std::size_t op_count = w.ops.size();
  if (op.phase != Phase::kBackward) {
    fail(source, at + ".differentiates", "only a backward op differentiates a forward op");
  }
  if (index(op.differentiates) >= op_count) {  // -1 included
    fail(source, at + ".differentiates", fmt::format("unknown op id {}", op.differentiates));
  }
  if (w.op(op.differentiates).phase != Phase::kForward) {
    fail(source, at + ".differentiates",
         fmt::format("{} is not a forward op", op_label(w.op(op.differentiates))));
  }
}

// The op's stream and the ops of other streams it waits for (Note [Device streams]).
void check_op_streams(const Workload& w, std::string_view source, const std::string& at,
                      const Op& op) {
  const std::size_t stream_count = std::max<std::size_t>(1, w.streams.size());
  if (op.stream < 0 || static_cast<std::size_t>(op.stream) >= stream_count) {
    fail(source, at + ".stream",
         w.streams.empty()
             ? fmt::format("stream {}, but the trace names no streams ($.streams), so every op "
                           "runs on stream 0",
                           op.stream)
             : fmt::format("stream {} is not one of the {} streams of $.streams", op.stream,
                           w.streams.size()));
  }
  std::unordered_set<OpId> seen;
  for (std::size_t k = 0; k < op.after.size(); ++k) {
    const OpId other = op.after[k];
    const std::string where = fmt::format("{}.after[{}]", at, k);
    if (index(other) >= w.ops.size())  // -1 included
      fail(source, where, fmt::format("unknown op id {}", other));
    if (other >= op.id) {
      fail(source, where,
           fmt::format("op {} is not issued before {}: an op waits only for earlier ones", other,
                       op_label(op)));
    }
    if (w.op(other).stream == op.stream) {
      fail(source, where,
           fmt::format("op {} runs on the same stream ({}), which runs its ops in order anyway",
                       other, op.stream));
    }
    if (!seen.insert(other).second) fail(source, where, fmt::format("op {} listed twice", other));
  }
}

// A collective's group: its ranks distinct, within the job's world, and holding this rank.
void check_collective_ranks(const Workload& w, std::string_view source, const std::string& where,
                            const Collective& c) {
  const std::optional<Distributed>& d = w.distributed;
  const std::int32_t world = d ? d->world_size : kMaxWorldSize;
  std::unordered_set<std::int32_t> seen;
  for (std::size_t k = 0; k < c.ranks.size(); ++k) {
    const std::int32_t r = c.ranks[k];
    const std::string at = fmt::format("{}.ranks[{}]", where, k);
    if (r < 0) fail(source, at, fmt::format("negative rank {}", r));
    if (r >= world)
      fail(source, at, fmt::format("rank {} is not below the world size {}", r, world));
    if (!seen.insert(r).second) fail(source, at, fmt::format("rank {} listed twice", r));
  }
  if (d && !c.ranks.empty() && !seen.contains(d->rank)) {
    fail(source, where + ".ranks",
         fmt::format("the group does not hold this step's own rank {} ($.distributed.rank)",
                     d->rank));
  }
}

// A send or a recv names the rank at its other end; no other collective does.
void check_collective_peer(const Workload& w, std::string_view source, const std::string& where,
                           const Collective& c) {
  const bool p2p = c.kind == CollectiveKind::kSend || c.kind == CollectiveKind::kRecv;
  if (!p2p) {
    if (c.peer != -1) {
      fail(
          source, where + ".peer",
          fmt::format("a peer, but the collective is {}, not a send or a recv", to_string(c.kind)));
    }
    return;
  }
  if (c.peer < 0) {
    fail(source, where + ".peer",
         fmt::format("a {} names its peer, the rank at the other end (from 0)", to_string(c.kind)));
  }
  const std::optional<Distributed>& d = w.distributed;
  const std::int32_t world = d ? d->world_size : kMaxWorldSize;
  if (c.peer >= world) {
    fail(source, where + ".peer",
         fmt::format("peer {} is not below the world size {}", c.peer, world));
  }
  if (d && c.peer == d->rank) {
    fail(source, where + ".peer",
         fmt::format("peer {} is this step's own rank ($.distributed.rank)", c.peer));
  }
}

// A communication op (trace format v3): sizes, group, peer, and no compute-side costs.
void check_collective(const Workload& w, std::string_view source, const std::string& at,
                      const Op& op) {
  if (!op.collective) return;
  const Collective& c = *op.collective;
  const std::string where = at + ".collective";
  const std::array<std::pair<const char*, Bytes>, 2> sizes{
      {{"in_bytes", c.in_bytes}, {"out_bytes", c.out_bytes}}};
  for (const auto& [key, bytes] : sizes) {
    if (bytes < 0)
      fail(source, fmt::format("{}.{}", where, key), fmt::format("negative size {}", bytes));
    if (bytes > kMaxTensorBytes) {
      fail(source, fmt::format("{}.{}", where, key),
           fmt::format("absurd size {} bytes (over 1 PiB)", bytes));
    }
  }
  if (c.sequence < 0) {
    fail(source, where + ".sequence", fmt::format("negative sequence number {}", c.sequence));
  }
  check_collective_ranks(w, source, where, c);
  check_collective_peer(w, source, where, c);
  if (op.workspace_bytes != 0) {
    fail(source, at + ".workspace_bytes",
         fmt::format("{} bytes, but a collective's op has no workspace", op.workspace_bytes));
  }
  if (!op.algorithms.empty())
    fail(source, at + ".algorithms", "a collective's op has no other algorithms");
}

void validate_ops(const Workload& w, std::string_view source) {
  for (std::size_t i = 0; i < w.ops.size(); ++i) {
    const Op& op = w.ops[i];
    const std::string at = fmt::format("$.ops[{}]", i);
    if (op.id != op_id(i)) {
      fail(source, at + ".id",
           fmt::format("id {} where {} was expected (op ids are their positions in issue order; a "
                       "duplicate or skipped id breaks that)",
                       op.id, i));
    }
    check_tensor_refs(w, source, at, op.inputs, "inputs");
    check_tensor_refs(w, source, at, op.outputs, "outputs");
    check_op_dataflow(w, source, at, op);
    check_op_costs(source, at, op);
    check_op_attributes(source, at, op);
    check_differentiates(w, source, at, op);
    check_op_streams(w, source, at, op);
    check_collective(w, source, at, op);
  }
}

// "all_reduce #3 of group '0'": a collective call as messages name it.
std::string call_label(const Collective& c) {
  return fmt::format(
      "{} #{} of {}", to_string(c.kind), c.sequence,
      c.group.empty() ? std::string("the default group") : fmt::format("group '{}'", c.group));
}

// Each call of a group is one op: (group, sequence) names it. Sends and receives are numbered
// apart from the group's collectives, as c10d numbers them.
void validate_collective_calls(const Workload& w, std::string_view source) {
  std::map<std::tuple<bool, std::string_view, std::int64_t>, OpId> calls;
  for (const Op& op : w.ops) {
    if (!op.collective) continue;
    const Collective& c = *op.collective;
    const bool p2p = c.kind == CollectiveKind::kSend || c.kind == CollectiveKind::kRecv;
    const auto [it, fresh] = calls.try_emplace({p2p, c.group, c.sequence}, op.id);
    if (!fresh) {
      fail(source, fmt::format("$.ops[{}].collective.sequence", op.id),
           fmt::format("{} again: op {} is that call already (a group numbers its calls)",
                       call_label(c), it->second));
    }
  }
}

// The step's place in its job and its streams' labels (trace format v3).
void validate_distributed(const Workload& w, std::string_view source) {
  if (const auto& d = w.distributed) {
    if (d->world_size < 1 || d->world_size > kMaxWorldSize) {
      fail(source, "$.distributed.world_size",
           fmt::format("{} is out of range (1 to {})", d->world_size, kMaxWorldSize));
    }
    if (d->rank < 0) fail(source, "$.distributed.rank", fmt::format("negative rank {}", d->rank));
    if (d->rank >= d->world_size) {
      fail(source, "$.distributed.rank",
           fmt::format("rank {} is not below the world size {}", d->rank, d->world_size));
    }
  }
  for (std::size_t k = 0; k < w.streams.size(); ++k) {
    if (w.streams[k].empty())
      fail(source, fmt::format("$.streams[{}]", k), "an empty label (each stream is named)");
  }
}

// Tensors that must be written by an op but name none (and that no op reads: a read is reported
// by validate_ops with the reading op).
void validate_unproduced(const Workload& w, std::string_view source) {
  for (const Tensor& t : w.tensors) {
    if (t.producer == kNoOp && !is_preexisting(t.kind)) {
      fail(source, fmt::format("$.tensors[{}].producer", t.id),
           fmt::format("tensor '{}' is a {} but names no producer op (only inputs, parameters and "
                       "optimizer state exist before the step)",
                       t.name, to_string(t.kind)));
    }
  }
}

// Runs after ids and references are known to be sound.
void validate_order(const Workload& w, std::string_view source) {
  if (auto cycle = WorkloadGraph(w).find_cycle()) {
    std::vector<std::string> names;
    for (OpId id : *cycle) names.push_back(fmt::format("'{}'", w.op(id).name));
    names.push_back(names.front());
    const bool forward = std::all_of(cycle->begin(), cycle->end(),
                                     [&](OpId id) { return w.op(id).phase == Phase::kForward; });
    fail(source, fmt::format("$.ops[{}]", cycle->front()),
         fmt::format("cycle in the {} graph: {}", forward ? "forward" : "op",
                     fmt::join(names, " -> ")));
  }
  for (const Op& op : w.ops) {
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      const Tensor& t = w.tensor(op.inputs[k]);
      const std::string at = fmt::format("$.ops[{}].inputs[{}]", op.id, k);
      if (t.producer == kNoOp) continue;
      if (t.producer == op.id) {
        fail(source, at,
             fmt::format("{} reads tensor {} '{}' that it writes itself", op_label(op), t.id,
                         t.name));
      }
      if (t.producer > op.id) {
        fail(source, at,
             fmt::format(
                 "{} reads tensor {} '{}' before it is produced (by {}, later in issue order)",
                 op_label(op), t.id, t.name, op_label(w.op(t.producer))));
      }
    }
  }
}

void validate_in_place(const Workload& w, std::string_view source) {
  // The last op (in issue order) that reads each tensor.
  std::vector<OpId> last_read(w.tensors.size(), kNoOp);
  for (const Op& op : w.ops) {
    for (TensorId t : op.inputs) last_read[index(t)] = op.id;
  }
  // The first two tensors (in id order) written in place over each tensor: finding whether another
  // tensor overwrites the same buffer stays linear in the number of tensors.
  const std::size_t tensor_count = w.tensors.size();
  std::vector<std::array<TensorId, 2>> overwriters(w.tensors.size(), {kNoTensor, kNoTensor});
  for (const Tensor& t : w.tensors) {
    if (index(t.in_place_of) >= tensor_count) continue;
    auto& slots = overwriters[index(t.in_place_of)];
    if (slots[0] == kNoTensor) {
      slots[0] = t.id;
    } else if (slots[1] == kNoTensor) {
      slots[1] = t.id;
    }
  }
  for (const Tensor& t : w.tensors) {
    if (t.in_place_of == kNoTensor) continue;
    const std::string at = fmt::format("$.tensors[{}].in_place_of", t.id);
    if (index(t.in_place_of) >= w.tensors.size()) {
      fail(source, at, fmt::format("unknown tensor id {}", t.in_place_of));
    }
    if (t.producer == kNoOp)
      fail(source, at, "only a tensor written by an op can be written in place");
    const Op& producer = w.op(t.producer);
    const Tensor& base = w.tensor(t.in_place_of);
    if (std::find(producer.inputs.begin(), producer.inputs.end(), base.id) ==
        producer.inputs.end()) {
      fail(
          source, at,
          fmt::format("tensor {} is not an input of the producer {}", base.id, op_label(producer)));
    }
    if (is_preexisting(base.kind)) {
      fail(source, at,
           fmt::format("cannot write over {} tensor {}", to_string(base.kind), base.id));
    }
    if (t.bytes > base.bytes) {
      fail(source, at,
           fmt::format("{} bytes do not fit in the {} bytes of tensor {}", t.bytes, base.bytes,
                       base.id));
    }
    if (last_read[index(base.id)] != producer.id) {
      fail(source, at,
           fmt::format(
               "tensor {} '{}' is still read after {} (by op {}), so it cannot be overwritten",
               base.id, base.name, op_label(producer), last_read[index(base.id)]));
    }
    const auto& slots = overwriters[index(base.id)];
    if (const TensorId other = slots[0] != t.id ? slots[0] : slots[1]; other != kNoTensor) {
      fail(source, at,
           fmt::format("tensor {} is already overwritten by tensor {}", base.id, other));
    }
  }
}

}  // namespace

std::string_view to_string(Phase phase) {
  return kPhaseNames[static_cast<std::size_t>(phase)];
}
std::string_view to_string(TensorKind kind) {
  return kKindNames[static_cast<std::size_t>(kind)];
}

std::optional<Phase> parse_phase(std::string_view text) {
  for (std::size_t i = 0; i < kPhaseNames.size(); ++i) {
    if (kPhaseNames[i] == text) return static_cast<Phase>(i);
  }
  return std::nullopt;
}

std::optional<TensorKind> parse_tensor_kind(std::string_view text) {
  for (std::size_t i = 0; i < kKindNames.size(); ++i) {
    if (kKindNames[i] == text) return static_cast<TensorKind>(i);
  }
  return std::nullopt;
}

std::optional<Bytes> dtype_bytes(std::string_view dtype) {
  struct Entry {
    std::string_view name;
    Bytes bytes;
  };
  static constexpr std::array<Entry, 12> kDtypes{{{"float64", 8},
                                                  {"float32", 4},
                                                  {"float16", 2},
                                                  {"bfloat16", 2},
                                                  {"int64", 8},
                                                  {"int32", 4},
                                                  {"int16", 2},
                                                  {"int8", 1},
                                                  {"uint8", 1},
                                                  {"bool", 1},
                                                  {"float8", 1},
                                                  {"double", 8}}};
  for (const auto& e : kDtypes) {
    if (e.name == dtype) return e.bytes;
  }
  return std::nullopt;
}

bool ends_backward_node(const Workload& workload, OpId op) {
  const Op& o = workload.op(op);
  if (o.phase != Phase::kBackward) return false;
  if (o.differentiates == kNoOp || index(op) + 1 == workload.ops.size()) return true;
  const Op& next = workload.op(op + 1);
  return next.phase != Phase::kBackward || next.differentiates != o.differentiates;
}

void validate(const Workload& workload, std::string_view source) {
  validate_device(workload.device, source);
  validate_distributed(workload, source);
  validate_tensors(workload, source);
  validate_ops(workload, source);
  validate_collective_calls(workload, source);
  validate_unproduced(workload, source);
  validate_order(workload, source);
  validate_in_place(workload, source);
  validate_totals(workload, source);
}

}  // namespace memplan::sim
