#include "core/plan.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/input_error.hpp"

namespace memplan::sim {

std::string_view to_string(Action action) {
  switch (action) {
    case Action::kKeep:
      return "keep";
    case Action::kSwap:
      return "swap";
    case Action::kRecompute:
      return "recompute";
    case Action::kEncode:
      return "encode";
  }
  return "?";
}

std::string_view to_string(Encoding encoding) {
  switch (encoding) {
    case Encoding::kNone:
      return "none";
    case Encoding::kBinarize:
      return "binarize";
    case Encoding::kSparse:
      return "sparse";
    case Encoding::kFp16:
      return "fp16";
    case Encoding::kFp10:
      return "fp10";
    case Encoding::kFp8:
      return "fp8";
  }
  return "?";
}

std::string action_label(Action action, Encoding encoding) {
  if (action == Action::kEncode) return fmt::format("encode:{}", to_string(encoding));
  return std::string(to_string(action));
}

std::optional<std::pair<Action, Encoding>> parse_action(std::string_view label) {
  for (Action a : {Action::kKeep, Action::kSwap, Action::kRecompute}) {
    if (label == to_string(a)) return std::pair{a, Encoding::kNone};
  }
  constexpr std::string_view kPrefix = "encode:";
  if (label.substr(0, kPrefix.size()) == kPrefix) {
    const auto scheme = label.substr(kPrefix.size());
    for (Encoding e : {Encoding::kBinarize, Encoding::kSparse, Encoding::kFp16, Encoding::kFp10,
                       Encoding::kFp8}) {
      if (scheme == to_string(e)) return std::pair{Action::kEncode, e};
    }
  }
  return std::nullopt;
}

std::optional<NarrowFormat> narrow_format(Encoding encoding) {
  switch (encoding) {
    case Encoding::kFp16:
      return kFp16Format;
    case Encoding::kFp10:
      return kFp10Format;
    case Encoding::kFp8:
      return kFp8Format;
    case Encoding::kNone:
    case Encoding::kBinarize:
    case Encoding::kSparse:
      break;
  }
  return std::nullopt;
}

std::int64_t sparse_planned_values(std::int64_t values) {
  return static_cast<std::int64_t>(std::ceil(kDefaultSparseDensity * static_cast<double>(values)));
}

Bytes encoded_bytes(Encoding encoding, const Tensor& tensor) {
  const std::int64_t values = tensor.bytes / 4;
  Bytes encoded = tensor.bytes;
  switch (encoding) {
    case Encoding::kNone:
      return tensor.bytes;
    case Encoding::kBinarize:
      encoded = (values + 7) / 8;
      break;
    case Encoding::kFp16:
    case Encoding::kFp10:
    case Encoding::kFp8:
      encoded = (values * narrow_format(encoding)->bits() + 7) / 8;
      break;
    case Encoding::kSparse:
      encoded = sparse_format_bytes(values, sparse_planned_values(values));
      break;
  }
  return std::max<Bytes>(1, encoded);
}

bool encodable_dtype(const Tensor& tensor) {
  return tensor.dtype.empty() || tensor.dtype == "float32";
}

std::array<std::size_t, kActionCount> Plan::action_counts() const {
  std::array<std::size_t, kActionCount> counts{};
  for (const Decision& d : decisions) ++counts[static_cast<std::size_t>(d.action)];
  return counts;
}

namespace {

struct Fnv {
  std::uint64_t hash = 14695981039346656037ull;
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      hash ^= p[i];
      hash *= 1099511628211ull;
    }
  }
  void integer(std::int64_t v) { bytes(&v, sizeof v); }
  void text(std::string_view s) {
    integer(static_cast<std::int64_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

bool is_relu(const Op& op) {
  return op.layer == Layer::kRelu;
}
bool is_max_pool(const Op& op) {
  return op.layer.rule().family == LayerFamily::kMaxPool;
}
bool is_conv(const Op& op) {
  return op.layer.rule().family == LayerFamily::kConvolution;
}

}  // namespace

std::uint64_t workload_fingerprint(const Workload& workload) {
  Fnv f;
  f.integer(static_cast<std::int64_t>(workload.tensors.size()));
  for (const Tensor& t : workload.tensors) {
    f.text(t.name);
    f.integer(t.bytes);
    f.integer(static_cast<std::int64_t>(t.kind));
    f.integer(value(t.producer));
    f.integer(value(t.in_place_of));
    if (t.lifetime_only) f.text("lifetime_only");  // only then: other plans keep their prints
  }
  f.integer(static_cast<std::int64_t>(workload.ops.size()));
  for (const Op& op : workload.ops) {
    f.text(op.name);
    f.text(op.layer.name());
    f.integer(static_cast<std::int64_t>(op.phase));
    f.integer(static_cast<std::int64_t>(op.inputs.size()));
    for (TensorId t : op.inputs) f.integer(value(t));
    f.integer(static_cast<std::int64_t>(op.outputs.size()));
    for (TensorId t : op.outputs) f.integer(value(t));
    f.integer(op.workspace_bytes);
  }
  return f.hash;
}

std::string decision_problem(const Decision& d, const FeatureMap& map, const Workload& w) {
  const Tensor& t = w.tensor(map.tensor);
  const Op& producer = w.op(t.producer);
  auto read_in_forward_by = [&](bool (*pred)(const Op&)) {
    for (OpId use : map.forward_uses) {
      if (pred(w.op(use))) return true;
    }
    return false;
  };
  if (d.action == Action::kEncode) {
    if (d.encoding != Encoding::kNone && !encodable_dtype(t)) {
      return fmt::format(
          "encode:{} needs a float32 map, this one is {} (Gist's encodings pack or narrow 32-bit "
          "floats)",
          to_string(d.encoding), t.dtype);
    }
    if (d.encoding == Encoding::kBinarize &&
        !(is_relu(producer) && read_in_forward_by(is_max_pool))) {
      return "encode:binarize needs a ReLU output that a max-pool reads (Gist binarize)";
    }
    if (d.encoding == Encoding::kSparse && !(is_relu(producer) && read_in_forward_by(is_conv))) {
      return "encode:sparse needs a ReLU output that a convolution reads (Gist sparse storage)";
    }
    if (d.encoding == Encoding::kNone) return "encode needs a scheme";
  } else if (d.encoding != Encoding::kNone) {
    return "only encode takes a scheme";
  }
  if (d.per_use && d.action != Action::kRecompute) return "per_use is for recomputed maps only";
  if (d.prefetch_before != kNoOp) {
    if (d.action != Action::kSwap && d.action != Action::kRecompute)
      return "prefetch_before is for swapped and recomputed maps only";
    if (d.per_use) return "a map recomputed per use has no issue point (prefetch_before)";
    const OpId last_forward = last_forward_use(map, w);
    const OpId first_backward = map.backward_uses.front();
    if (d.prefetch_before <= last_forward || d.prefetch_before > first_backward) {
      return fmt::format(
          "prefetch_before must be an op after the last forward use (op {} '{}') and no later than "
          "the first backward use (op {} '{}')",
          last_forward, w.op(last_forward).name, first_backward, w.op(first_backward).name);
    }
  }
  if (d.release_before != kNoOp) {
    if (d.action != Action::kSwap) return "release_before is for swapped maps only";
    const OpId last_forward = last_forward_use(map, w);
    const OpId prefetch =
        d.prefetch_before != kNoOp ? d.prefetch_before : default_prefetch_point(map, w);
    if (d.release_before <= last_forward || d.release_before > prefetch) {
      return fmt::format(
          "release_before must be an op after the last forward use (op {} '{}') and no later than "
          "the prefetch point (op {} '{}')",
          last_forward, w.op(last_forward).name, prefetch, w.op(prefetch).name);
    }
  }
  return {};
}

OpId last_forward_use(const FeatureMap& map, const Workload& workload) {
  const OpId producer = workload.tensor(map.tensor).producer;
  return map.forward_uses.empty() ? producer : std::max(producer, map.forward_uses.back());
}

OpId default_prefetch_point(const FeatureMap& map, const Workload& workload) {
  const OpId first_backward = map.backward_uses.front();
  return std::max(last_forward_use(map, workload) + 1, first_backward - 1);
}

std::vector<bool> regenerable_tensors(const Workload& workload) {
  // Ops are in issue order, so producers come before readers.
  std::vector<bool> regenerable(workload.tensors.size(), false);
  for (const Tensor& t : workload.tensors) regenerable[index(t.id)] = is_preexisting(t.kind);
  for (const Op& op : workload.ops) {
    // An op of another stream is re-run on its stream, a collective by every rank of its group
    // alike (Note [Issue point of a recomputation] in core/plan.hpp).
    bool ok = op.phase == Phase::kForward;
    for (TensorId in : op.inputs) ok = ok && regenerable[index(in)];
    for (TensorId out : op.outputs) regenerable[index(out)] = ok;
  }
  return regenerable;
}

std::vector<bool> ops_rerun_by_recompute(const Plan& plan, const Workload& workload) {
  std::vector<const Decision*> decision(workload.tensors.size(), nullptr);
  for (const Decision& d : plan.decisions) decision[index(d.tensor)] = &d;
  std::vector<bool> rerun(workload.ops.size(), false);
  std::vector<OpId> stack;
  for (const Decision& d : plan.decisions) {
    if (d.action == Action::kRecompute) stack.push_back(workload.tensor(d.tensor).producer);
  }
  while (!stack.empty()) {
    const OpId op = stack.back();
    stack.pop_back();
    if (op == kNoOp || rerun[index(op)]) continue;
    rerun[index(op)] = true;
    for (TensorId t : workload.op(op).inputs) {
      const Tensor& input = workload.tensor(t);
      if (input.producer == kNoOp || input.kind != TensorKind::kActivation) continue;
      const Decision* d = decision[index(t)];
      if (d == nullptr || d->action == Action::kRecompute) stack.push_back(input.producer);
    }
  }
  return rerun;
}

namespace {

bool decoded_lossily(const Decision& d) {
  return d.action == Action::kEncode &&
         (d.encoding == Encoding::kBinarize || narrow_format(d.encoding).has_value());
}

void check_lossy_maps_are_not_recomputed_from(const Plan& plan, const std::vector<FeatureMap>& maps,
                                              const Workload& workload, std::string_view source) {
  const std::optional<LossyConflict> conflict = lossy_map_recomputed_from(plan, maps, workload);
  if (!conflict) return;
  const Decision& d = plan.decisions[conflict->map];
  throw InputError(
      fmt::format("{}: $.maps[{}]", source, conflict->map),
      fmt::format("tensor '{}' cannot be {}: its forward consumer '{}' is re-run to "
                  "regenerate a recomputed map and would read the {}",
                  workload.tensor(d.tensor).name,
                  d.encoding == Encoding::kBinarize
                      ? std::string("binarized")
                      : fmt::format("narrowed to {}", to_string(d.encoding)),
                  workload.op(conflict->consumer).name,
                  d.encoding == Encoding::kBinarize ? "1-bit mask" : "rounded values"));
}

}  // namespace

// A map kept lossily (binarize: its sign; fp16/fp10/fp8: rounded values) serves backward, which
// needs no more, but a forward op that reads the map and is re-run to regenerate a recomputed map
// would compute from the decoded values (a max-pool would pick other indices, inconsistent with
// the forward pass).
std::optional<LossyConflict> lossy_map_recomputed_from(const Plan& plan,
                                                       const std::vector<FeatureMap>& maps,
                                                       const Workload& workload) {
  if (std::none_of(plan.decisions.begin(), plan.decisions.end(), decoded_lossily)) return {};
  const std::vector<bool> rerun = ops_rerun_by_recompute(plan, workload);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    if (!decoded_lossily(plan.decisions[i])) continue;
    for (OpId use : maps[i].forward_uses) {
      if (rerun[index(use)]) return LossyConflict{i, use};
    }
  }
  return {};
}

std::string host_placement_problem(TensorId t, const Workload& w) {
  const Tensor& tensor = w.tensor(t);
  if (tensor.lifetime_only) return "only its lifetime is known, not which ops read it";
  if (!is_preexisting(tensor.kind) && tensor.kind != TensorKind::kGradient) {
    return fmt::format(
        "a tensor of kind {} is not placed (parameters, optimizer state, inputs and gradients "
        "are; feature maps take swap)",
        to_string(tensor.kind));
  }
  for (const Tensor& other : w.tensors) {
    if (other.in_place_of == t) {
      return fmt::format("'{}' is written over in place by '{}'", tensor.name, other.name);
    }
  }
  if (tensor.in_place_of != kNoTensor) return "an in-place output stays where its base is";
  bool read = false;
  bool read_by_update = false;
  for (const Op& op : w.ops) {
    for (TensorId x : op.inputs) {
      if (x != t) continue;
      read = true;
      read_by_update = read_by_update || op.phase == Phase::kUpdate;
    }
  }
  if (is_preexisting(tensor.kind)) return read ? "" : "no op reads it";
  const bool backward = tensor.producer != kNoOp && w.op(tensor.producer).phase == Phase::kBackward;
  if (backward && read_by_update) return "";
  return "only a gradient written by a backward op and read by an update op goes to the host";
}

std::vector<TensorId> host_placeable(const Workload& w, TensorKind kind) {
  // host_placement_problem's rules, over every tensor in one pass.
  std::vector<std::uint8_t> read(w.tensors.size(), 0);  // bit 0: read, bit 1: by an update op
  for (const Op& op : w.ops) {
    for (TensorId x : op.inputs) read[index(x)] |= op.phase == Phase::kUpdate ? 3 : 1;
  }
  std::vector<bool> overwritten(w.tensors.size(), false);
  for (const Tensor& t : w.tensors) {
    if (t.in_place_of != kNoTensor) overwritten[index(t.in_place_of)] = true;
  }
  std::vector<TensorId> out;
  for (const Tensor& t : w.tensors) {
    const auto i = index(t.id);
    if (t.kind != kind || overwritten[i] || t.in_place_of != kNoTensor || t.lifetime_only) continue;
    if (is_preexisting(kind)
            ? read[i] != 0
            : kind == TensorKind::kGradient && (read[i] & 2) != 0 && t.producer != kNoOp &&
                  w.op(t.producer).phase == Phase::kBackward) {
      out.push_back(t.id);
    }
  }
  return out;
}

void set_host_placement(Plan& plan, const Workload& w, TensorKind kind, bool on) {
  std::vector<TensorId>& host = plan.host_tensors;
  host.erase(std::remove_if(host.begin(), host.end(),
                            [&](TensorId t) { return w.tensor(t).kind == kind; }),
             host.end());
  if (on) {
    const std::vector<TensorId> placed = host_placeable(w, kind);
    host.insert(host.end(), placed.begin(), placed.end());
    std::sort(host.begin(), host.end());
  }
  drop_stale_host_prefetches(plan, w);
}

std::string host_update_problem(const Plan& plan, const Workload& w) {
  if (!plan.host_update) return "";
  std::vector<bool> host(w.tensors.size(), false);
  for (TensorId t : plan.host_tensors) host[index(t)] = true;
  // A tensor an update op writes is one of the update's temporaries, in host memory.
  auto temporary = [&](const Tensor& t) {
    return t.producer != kNoOp && w.op(t.producer).phase == Phase::kUpdate;
  };
  bool any = false;
  for (const Op& op : w.ops) {
    if (op.phase != Phase::kUpdate) {
      if (any)
        return fmt::format("op '{}' ({}) runs after the update: a host update ends the step",
                           op.name, to_string(op.phase));
      continue;
    }
    any = true;
    for (TensorId x : op.inputs) {
      const Tensor& t = w.tensor(x);
      if (is_preexisting(t.kind) && t.kind != TensorKind::kOptimizerState) continue;
      if (temporary(t)) continue;
      if (t.kind == TensorKind::kOptimizerState || t.kind == TensorKind::kGradient) {
        if (host[index(x)]) continue;
        const std::string placement = host_placement_problem(x, w);
        return fmt::format(
            "update op '{}' runs on the host but reads '{}' ({}) on the device: {}", op.name,
            t.name, to_string(t.kind),
            placement.empty() ? "place it on the host" : "it cannot go to the host: " + placement);
      }
      const std::string from = t.producer == kNoOp ? std::string("from before the step")
                                                   : fmt::format("written by {} op '{}'",
                                                                 to_string(w.op(t.producer).phase),
                                                                 w.op(t.producer).name);
      return fmt::format(
          "update op '{}' runs on the host but reads '{}' ({}, {}), which stays on the device: a "
          "host update reads tensors from before the step, host-placed gradients and what its "
          "own ops write",
          op.name, t.name, to_string(t.kind), from);
    }
    for (TensorId o : op.outputs) {
      const Tensor& t = w.tensor(o);
      if (t.in_place_of == kNoTensor || temporary(w.tensor(t.in_place_of))) continue;
      const Tensor& base = w.tensor(t.in_place_of);
      return fmt::format(
          "update op '{}' writes '{}' over '{}' ({}), which no update op made: a host update "
          "writes new versions only of its own temporaries",
          op.name, t.name, base.name, to_string(base.kind));
    }
  }
  return any ? "" : "the workload has no update op";
}

// Copied out after its producer, a gradient's device copy goes after its last use before the
// update, and at the earliest one op after the producer, so that the copy-out overlaps that op
// instead of stalling compute right away.
OpId host_gradient_drop(TensorId t, std::span<const OpId> readers, const Workload& w) {
  const OpId last_op = op_id(w.ops.size() - 1);
  OpId drop = std::min(w.tensor(t).producer + 1, last_op);
  OpId update_first = kNoOp;
  for (OpId r : readers) {
    const bool update = w.op(r).phase == Phase::kUpdate;
    if (!update) drop = std::max(drop, r);
    if (update && update_first == kNoOp) update_first = r;
  }
  return update_first != kNoOp ? std::min(drop, update_first) : drop;
}

OpId host_prefetch_point(const Plan& plan, TensorId t, const HostUseGroup& g) {
  const auto& chosen = plan.host_prefetches;
  const auto it = std::lower_bound(chosen.begin(), chosen.end(), std::pair(t, g.first_use),
                                   [](const HostPrefetch& p, std::pair<TensorId, OpId> key) {
                                     return std::pair(p.tensor, p.first_use) < key;
                                   });
  return it != chosen.end() && it->tensor == t && it->first_use == g.first_use ? it->prefetch_before
                                                                               : g.default_prefetch;
}

void host_use_groups(TensorId t, std::span<const OpId> readers, bool host_update, const Workload& w,
                     std::vector<HostUseGroup>& out) {
  out.clear();
  auto add = [&](OpId first_use, OpId last_use, OpId previous_drop) {
    const OpId earliest = previous_drop + 1;  // op 0 after kNoOp
    if (earliest > first_use) return;         // the previous copy is still there: no prefetch
    out.push_back({first_use, last_use, earliest, std::max(earliest, first_use - 1)});
  };
  if (!is_preexisting(w.tensor(t).kind)) {  // a gradient: its update uses, on the device
    if (host_update) return;
    const auto update = std::find_if(readers.begin(), readers.end(),
                                     [&](OpId r) { return w.op(r).phase == Phase::kUpdate; });
    if (update != readers.end()) add(*update, readers.back(), host_gradient_drop(t, readers, w));
    return;
  }
  OpId previous_end = kNoOp;
  for (std::size_t k = 0; k < readers.size();) {
    const OpId group_first = readers[k];
    const Phase phase = w.op(group_first).phase;
    OpId group_last = group_first;
    while (k < readers.size() && w.op(readers[k]).phase == phase) group_last = readers[k++];
    if (phase == Phase::kUpdate && host_update) continue;  // reads the host slot
    add(group_first, group_last, previous_end);
    previous_end = group_last;
  }
}

std::vector<HostUseGroup> host_use_groups(TensorId t, bool host_update, const Workload& w) {
  std::vector<OpId> readers;
  for (const Op& op : w.ops) {
    for (TensorId x : op.inputs) {
      if (x == t) readers.push_back(op.id);
    }
  }
  std::vector<HostUseGroup> groups;
  host_use_groups(t, readers, host_update, w, groups);
  return groups;
}

namespace {
// Why `p` is not allowed (empty when it is); `readers`: the ops that read its tensor, ascending.
std::string host_prefetch_problem(const HostPrefetch& p, const Plan& plan,
                                  std::span<const OpId> readers, const Workload& w,
                                  std::vector<HostUseGroup>& groups) {
  const std::string& name = w.tensor(p.tensor).name;
  if (!std::binary_search(plan.host_tensors.begin(), plan.host_tensors.end(), p.tensor))
    return fmt::format("tensor '{}' is not placed on the host", name);
  if (index(p.first_use) >= w.ops.size()) return fmt::format("unknown op id {}", p.first_use);
  if (index(p.prefetch_before) >= w.ops.size())
    return fmt::format("unknown op id {}", p.prefetch_before);
  host_use_groups(p.tensor, readers, plan.host_update, w, groups);
  const auto group = std::find_if(groups.begin(), groups.end(), [&](const HostUseGroup& g) {
    return g.first_use == p.first_use;
  });
  if (group == groups.end()) {
    std::string firsts;
    for (const HostUseGroup& g : groups)
      firsts += fmt::format("{}op {} '{}'", firsts.empty() ? "" : ", ", g.first_use,
                            w.op(g.first_use).name);
    return fmt::format(
        "op {} '{}' is not the first use of a prefetched group of uses of '{}' (those are: {})",
        p.first_use, w.op(p.first_use).name, name, firsts.empty() ? "none" : firsts);
  }
  if (p.prefetch_before < group->earliest_prefetch || p.prefetch_before > p.first_use) {
    return fmt::format(
        "the prefetch of '{}' for its uses from op {} '{}' must be before an op from op {} '{}' "
        "(after the previous device copy is dropped) to that first use",
        name, p.first_use, w.op(p.first_use).name, group->earliest_prefetch,
        w.op(group->earliest_prefetch).name);
  }
  return {};
}
}  // namespace

std::vector<std::string> host_prefetch_problems(const Plan& plan, const Workload& w) {
  // The readers of the tensors the entries name, in one pass over the ops.
  std::vector<TensorId> named;
  for (const HostPrefetch& p : plan.host_prefetches) {
    if (index(p.tensor) < w.tensors.size()) named.push_back(p.tensor);
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  std::vector<std::vector<OpId>> readers(named.size());
  for (const Op& op : w.ops) {
    for (TensorId x : op.inputs) {
      const auto it = std::lower_bound(named.begin(), named.end(), x);
      if (it != named.end() && *it == x)
        readers[static_cast<std::size_t>(it - named.begin())].push_back(op.id);
    }
  }
  std::vector<std::string> problems;
  std::vector<HostUseGroup> groups;
  for (const HostPrefetch& p : plan.host_prefetches) {
    if (index(p.tensor) >= w.tensors.size()) {  // -1 included
      problems.push_back(fmt::format("unknown tensor id {}", p.tensor));
      continue;
    }
    const auto k = std::lower_bound(named.begin(), named.end(), p.tensor) - named.begin();
    problems.push_back(
        host_prefetch_problem(p, plan, readers[static_cast<std::size_t>(k)], w, groups));
  }
  return problems;
}

void drop_stale_host_prefetches(Plan& plan, const Workload& w) {
  const std::vector<std::string> problems = host_prefetch_problems(plan, w);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (problems[i].empty()) plan.host_prefetches[kept++] = plan.host_prefetches[i];
  }
  plan.host_prefetches.resize(kept);
}

namespace {
void check_host_prefetches(const Plan& plan, const Workload& workload, std::string_view source) {
  const std::vector<std::string> problems = host_prefetch_problems(plan, workload);
  for (std::size_t i = 0; i < plan.host_prefetches.size(); ++i) {
    const HostPrefetch& p = plan.host_prefetches[i];
    const std::string at = fmt::format("{}: host_prefetches[{}]", source, i);
    if (!problems[i].empty()) throw InputError(at, problems[i]);
    if (i > 0) {
      const HostPrefetch& q = plan.host_prefetches[i - 1];
      if (std::pair(p.tensor, p.first_use) <= std::pair(q.tensor, q.first_use)) {
        throw InputError(at,
                         "host prefetches must name each group once, in ascending (tensor, first "
                         "use) order");
      }
    }
  }
}

void check_host_placement(const Plan& plan, const Workload& workload, std::string_view source) {
  for (std::size_t i = 0; i < plan.host_tensors.size(); ++i) {
    const TensorId t = plan.host_tensors[i];
    const std::string at = fmt::format("{}: $.tensors[{}]", source, i);
    if (index(t) >= workload.tensors.size()) {  // -1 included
      throw InputError(at, fmt::format("unknown tensor id {}", t));
    }
    if (i > 0 && t <= plan.host_tensors[i - 1]) {
      throw InputError(at, "host-placed tensors must name each tensor once, in ascending id order");
    }
    if (auto problem = host_placement_problem(t, workload); !problem.empty()) {
      throw InputError(at, fmt::format("tensor '{}' cannot be placed on the host: {}",
                                       workload.tensor(t).name, problem));
    }
  }
  if (auto problem = host_update_problem(plan, workload); !problem.empty()) {
    throw InputError(fmt::format("{}: $.update", source), problem);
  }
  check_host_prefetches(plan, workload, source);
}
}  // namespace

void validate_plan(const Plan& plan, const Workload& workload, std::string_view source) {
  const std::uint64_t expected = workload_fingerprint(workload);
  if (plan.fingerprint != expected) {
    throw InputError(
        fmt::format("{}: $.workload.fingerprint", source),
        fmt::format("the plan was made for another workload (fingerprint {:016x}, this "
                    "trace has {:016x})",
                    plan.fingerprint, expected));
  }
  const auto maps = find_feature_maps(workload);
  if (plan.decisions.size() != maps.size()) {
    throw InputError(std::string(source),
                     fmt::format("the plan decides {} maps, the workload has {} feature maps",
                                 plan.decisions.size(), maps.size()));
  }
  for (std::size_t i = 0; i < plan.algorithms.size(); ++i) {
    const AlgorithmChoice& c = plan.algorithms[i];
    const std::string at = fmt::format("{}: $.algorithms[{}]", source, i);
    if (index(c.op) >= workload.ops.size()) {  // -1 included
      throw InputError(at, fmt::format("unknown op id {}", c.op));
    }
    if (i > 0 && c.op <= plan.algorithms[i - 1].op) {
      throw InputError(at, "algorithm choices must name each op once, in ascending op order");
    }
    const Op& op = workload.op(c.op);
    if (c.algorithm < 0 || c.algorithm >= static_cast<std::int32_t>(op.algorithms.size())) {
      throw InputError(at, fmt::format("op '{}' has no alternative algorithm {} (it has {})",
                                       op.name, c.algorithm, op.algorithms.size()));
    }
  }
  const std::vector<bool> regenerable = regenerable_tensors(workload);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const Decision& d = plan.decisions[i];
    if (d.tensor != maps[i].tensor) {
      throw InputError(fmt::format("{}: $.maps[{}]", source, i),
                       fmt::format("expected feature map {} '{}'", maps[i].tensor,
                                   workload.tensor(maps[i].tensor).name));
    }
    if (auto problem = decision_problem(d, maps[i], workload); !problem.empty()) {
      throw InputError(fmt::format("{}: $.maps[{}]", source, i),
                       fmt::format("tensor '{}': {}", workload.tensor(d.tensor).name, problem));
    }
    if (d.action == Action::kRecompute && !regenerable[index(d.tensor)]) {
      throw InputError(
          fmt::format("{}: $.maps[{}]", source, i),
          fmt::format("tensor '{}' cannot be recomputed: its producer reads, directly or "
                      "through other forward ops, a tensor that no forward op writes and that "
                      "does not exist before the step",
                      workload.tensor(d.tensor).name));
    }
  }
  check_lossy_maps_are_not_recomputed_from(plan, maps, workload, source);
  check_host_placement(plan, workload, source);
}

}  // namespace memplan::sim
