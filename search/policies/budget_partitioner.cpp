// PyTorch's memory-budget partitioner: under `torch.compile`, AOTAutograd's min-cut partitioner
// (torch/_functorch/partitioners.py, `choose_saved_values_set`) chooses what the compiled forward
// saves for backward, and `torch._functorch.config.activation_memory_budget` (0 to 1) trades
// saved bytes for recomputation.
//
// Note [The memory-budget partitioner in a plan]
// PyTorch's rule, as of 2.15:
//   - budget 1: the default min-cut, which recomputes the cheap pointwise ops (its allowlist) and
//     saves the rest;
//   - budget 0: save only the graph's inputs (its primals: parameters, buffers, the batch),
//     recompute everything;
//   - between: saved sizes count the inputs a cut saves, and a budget b allows a cut whose size is
//     below min + b x (max - min), min the size of all the inputs and max that of budget 1's cut.
//     First the min-cut with the allowlist but without the bans on pointwise ops used far apart;
//     if that does not fit, the min-cut without the allowlist, which bans (saves) only random ops,
//     reductions (an output 4x smaller than its inputs) and compute-intensive ops (matmuls,
//     convolution, attention); if that does not fit either, a 0/1 knapsack over those banned ops'
//     outputs (sizes normalised by max - min, quantised to 1/10,000, the budget the capacity;
//     value: FlopCounterMode's FLOPs, at least 1, so 1 for a reduction or a random op; the `dp`
//     solver over a float32 table, largest first) chooses which stay banned, and a last min-cut
//     may recompute the others.
// In a plan, with memplan's feature maps as the saved values: at budget 1 the maps are kept
// (eager's set, which the default cut matches on transformers and MLPs); the inputs are the
// tensors forward reads that no op writes, of kind parameter or input; a plan's size is its kept
// maps' bytes as PyTorch's decomposed graph would hold them (a max-pool's indices as int8
// offsets, one byte an element; a map only ReLU's or ReLU6's backward reads as a bool mask; a
// max-pool's input not read by its backward; a normalisation's statistics that are no reduction
// free while their data input is saved) plus those of the inputs that are no map and that
// backward or a recomputation (`ops_rerun_by_recompute`) reads. Budget 1's size so counted
// normalises the ladder's ratios and the knapsack's weights, as PyTorch's own cut's size does.
// The ladder recomputes the maps of ops on the allowlist (OpKind::kPointwise; copies and views;
// a normalisation's statistics when, weighed together as the `var_mean` they decompose into,
// they are no reduction), then the others but those of random ops, reductions and
// compute-intensive ops (a copy of a matmul's output, or of it with a bias added, counts as the
// matmul), then runs the knapsack over those maps: a compute-intensive one is worth its op's
// FLOPs (the trace's, else worked out from the shapes as FlopCounterMode counts them; a copy
// takes its share of the matmul's), the others 1; if some compute-intensive op's FLOPs are
// unknown, durations stand in for all of them. What the knapsack does not save is recomputed. A
// map memplan cannot regenerate is always kept.
//
// What memplan's emulation leaves out: the last min-cut's choice of what to save instead of a
// rejected item, which may be no feature map at all (a matmul's output that eager frees, the
// attention scores before the softmax: memplan recomputes rejected items from the nearest kept
// map); the min-cut's cheaper cuts through the same ops at budget 1 and on the first rung (saving
// a norm's input instead of its output, recomputing a ReLU from a saved convolution output and
// statistics instead of saving its mask); its bans on recomputing pointwise chains used far
// apart; and in the plan (not in the sizes above) AOTAutograd's decompositions (softmax and layer
// norm as reductions plus pointwise ops, whose small statistics it saves; ReLU outputs saved as
// bool masks, max-pool's int8 offsets; an in-place ReLU6 functionalised, which saves neither the
// copy of its input eager makes nor its output): a plan keeps eager's maps whole.
// What the partitioner cannot see (and memplan can): where in the step the peak is (it bounds
// saved bytes, not the peak), the allocator's fragmentation, copy engines that could swap
// instead of recompute, and op times as they run (FLOPs rank a memory-bound op as free).
//
// In `compare` the row is a user who tunes the knob: budgets 1, 0.9, ..., 0.1, 0, the first
// whose plan fits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include <fmt/core.h>

#include "core/plan.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

// What the partitioner may do with a map's producer (Note [The memory-budget partitioner in a
// plan]).
enum class Role {
  kInput,             // nothing can regenerate it: saved at every budget
  kPointwise,         // on the recomputable allowlist
  kRandom,            // a random op: banned, a knapsack item
  kReduction,         // a reduction's small output (a norm's statistics): banned, a knapsack item
  kComputeIntensive,  // banned, a knapsack item valued by its FLOPs
  kOther,             // recomputable once the allowlist is off
};

// The compute-intensive op a tensor is that op's output of, directly or through a bias added to
// it (nn.MultiheadAttention's in-projection: an mm, then an add of in_proj_bias), else kNoOp.
sim::OpId compute_source(const sim::Workload& w, sim::TensorId t) {
  const sim::OpId from = w.tensor(t).producer;
  if (from == sim::kNoOp) return sim::kNoOp;
  const sim::Op& op = w.op(from);
  if (compute_intensive(op_kind(op))) return from;
  if (op.layer.kind() != sim::Layer::kAdd || op.outputs.size() != 1) return sim::kNoOp;
  sim::OpId source = sim::kNoOp;
  for (sim::TensorId input : op.inputs) {
    if (sim::is_persistent(w.tensor(input).kind)) continue;
    const sim::OpId of = w.tensor(input).producer;
    if (source != sim::kNoOp || of == sim::kNoOp || !compute_intensive(op_kind(w.op(of)))) {
      return sim::kNoOp;
    }
    source = of;
  }
  return source;
}

// The matmul or convolution a layout copy of a compute-intensive op's output copies (the
// contiguous q and k; the in-projection's q, k and v with its bias), else kNoOp.
sim::OpId copied_compute_op(const sim::Workload& w, const sim::Op& copy) {
  if (op_kind(copy) != OpKind::kLayoutCopy || copy.inputs.empty()) return sim::kNoOp;
  const sim::OpId source = compute_source(w, copy.inputs.front());
  const bool of_compute = std::all_of(copy.inputs.begin(), copy.inputs.end(), [&](sim::TensorId t) {
    return compute_source(w, t) != sim::kNoOp;
  });
  return of_compute ? source : sim::kNoOp;
}

// The data input of the normalisation whose statistic a map is (not its output), else kNoTensor.
sim::TensorId statistic_of(const NetworkView& view, int map) {
  const sim::Workload& w = view.workload();
  const sim::Op& producer = w.op(view.producer(map));
  const bool statistic = producer.layer.rule().family == sim::LayerFamily::kNormalization &&
                         !producer.inputs.empty() && producer.outputs.size() > 1 &&
                         producer.outputs.front() != view.feature_maps()[map].tensor;
  return statistic ? producer.inputs.front() : sim::kNoTensor;
}

Role role_of(const NetworkView& view, int map) {
  const sim::Workload& w = view.workload();
  const sim::Op& producer = w.op(view.producer(map));
  const OpKind kind = op_kind(producer);
  if (kind == OpKind::kPointwise) return Role::kPointwise;
  if (kind == OpKind::kRandom) return Role::kRandom;
  if (compute_intensive(kind)) return Role::kComputeIntensive;
  // A copy of a matmul's output (the contiguous q and k) goes with the matmul: PyTorch's
  // knapsack weighs the matmul's output, which backward reads through the copy.
  if (copied_compute_op(w, producer) != sim::kNoOp) return Role::kComputeIntensive;
  // Any other copy or view is on the allowlist (`aten.clone`, `view`, `permute`, ...): the copy
  // of its input an in-place ReLU6 makes for its backward, say.
  if (kind == OpKind::kLayoutCopy) return Role::kPointwise;
  // `should_ban_recomputation`'s reduction rule: an output 4x smaller than its op's inputs.
  // AOTAutograd decomposes a normalisation's statistics into one `var_mean` over the data input
  // (`var` and `mean` are on the allowlist), whose two outputs are weighed together against that
  // input alone: they are a reduction only when both are 4x smaller (ResNet's batch norms over
  // 2x2 or 1x1 maps at batch 2 are not), else recomputed with the allowlist's ops. Its output
  // stays with the others: recomputing it needs its input, which the min-cut must then save
  // (memplan's plan would regenerate it from further back, through matmuls the min-cut bans).
  if (const sim::TensorId data = statistic_of(view, map); data != sim::kNoTensor) {
    sim::Bytes statistics = 0;
    for (std::size_t i = 1; i < producer.outputs.size(); ++i) {
      statistics += w.tensor(producer.outputs[i]).bytes;
    }
    return 4 * statistics < w.tensor(data).bytes ? Role::kReduction : Role::kPointwise;
  }
  sim::Bytes inputs = 0;
  for (sim::TensorId t : producer.inputs) inputs += w.tensor(t).bytes;
  if (4 * view.map_bytes(map) < inputs) return Role::kReduction;
  return Role::kOther;
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// What torch.utils.flop_counter counts for a compute-intensive op, the partitioner's runtime
// estimate ("flops"), from the shapes of its tensors where the trace has no count: 2 x output
// elements x the contracted length for a matmul (the length is the last dimension of the first
// operand whose rows are the output's); 2 x output elements x a weight's elements per output
// channel for a convolution; 2 x (q's rows) x keys x (query + value width) for attention (q, k
// and v views of one packed tensor: as many keys as queries, all as wide as the output). nullopt
// where the shapes do not say.
std::optional<double> flops_of(const sim::Workload& w, const sim::Op& op) {
  if (op.flops) return op.flops;
  if (op.outputs.empty()) return std::nullopt;
  const std::vector<std::int64_t>& out = w.tensor(op.outputs.front()).shape;
  if (out.empty() || elements(out) <= 0) return std::nullopt;
  const double n_out = static_cast<double>(elements(out));
  const OpKind kind = op_kind(op);
  const auto shape = [&](std::size_t i) -> const std::vector<std::int64_t>& {
    return w.tensor(op.inputs[i]).shape;
  };
  if (kind == OpKind::kLinearMatmul || kind == OpKind::kBatchedMatmul) {
    const std::int64_t rows = elements(out) / out.back();
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const std::vector<std::int64_t>& s = shape(i);
      if (s.size() >= 2 && s.back() > 0 && elements(s) / s.back() == rows) {
        return 2 * n_out * static_cast<double>(s.back());
      }
    }
    return std::nullopt;
  }
  if (kind == OpKind::kConvolution && out.size() >= 3) {
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const std::vector<std::int64_t>& s = shape(i);
      if (w.tensor(op.inputs[i]).kind == sim::TensorKind::kParameter && s.size() == out.size() &&
          s.front() == out[1]) {
        return 2 * n_out * static_cast<double>(elements(s)) / static_cast<double>(s.front());
      }
    }
    return std::nullopt;
  }
  const auto packed = [&] {  // q, k and v one tensor of the trace (or fewer inputs listed)
    const std::size_t n = std::min<std::size_t>(3, op.inputs.size());
    for (std::size_t i = 1; i < n; ++i) {
      if (op.inputs[i] != op.inputs.front()) return false;
    }
    return n > 0;
  };
  if (kind == OpKind::kFusedAttention && packed() && out.size() >= 2) {
    // q, k and v views of one packed tensor (a self-attention's in-projection, one storage, one
    // tensor of the trace): the output [..., L, D] says it all, keys as many as queries and as
    // wide as the values.
    const auto length = static_cast<double>(out[out.size() - 2]);
    const auto width = static_cast<double>(out.back());
    return 2 * (n_out / width) * length * 2 * width;
  }
  if (kind == OpKind::kFusedAttention && op.inputs.size() >= 3) {
    const std::vector<std::int64_t>& q = shape(0);
    const std::vector<std::int64_t>& k = shape(1);
    const std::vector<std::int64_t>& v = shape(2);
    const bool distinct = op.inputs[0] != op.inputs[1] && op.inputs[1] != op.inputs[2] &&
                          op.inputs[0] != op.inputs[2];
    if (distinct && q.size() >= 2 && k.size() == q.size() && v.size() == q.size() &&
        k.back() == q.back() && k[k.size() - 2] == v[v.size() - 2]) {
      const double q_rows = static_cast<double>(elements(q)) / static_cast<double>(q.back());
      return 2 * q_rows * static_cast<double>(k[k.size() - 2]) *
             static_cast<double>(q.back() + v.back());
    }
  }
  return std::nullopt;
}

std::vector<Role> roles(const NetworkView& view) {
  const std::vector<bool> regenerable = sim::regenerable_tensors(view.workload());
  std::vector<Role> out;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    out.push_back(regenerable[sim::index(view.feature_maps()[m].tensor)]
                      ? role_of(view, static_cast<int>(m))
                      : Role::kInput);
  }
  return out;
}

// PyTorch's `dp_knapsack`: items' memory quantised to 1/10,000 (Python's round, half to even),
// the most value within `capacity` (also quantised) in a float32 table, backtracked from the last
// item. Returns which items are saved.
std::vector<bool> dp_knapsack(const std::vector<double>& memory, const std::vector<double>& value,
                              double capacity) {
  constexpr double kScale = 10000;
  const auto cap = static_cast<std::size_t>(std::max(0.0, std::nearbyint(capacity * kScale)));
  const std::size_t n = memory.size();
  std::vector<std::size_t> weight(n);
  for (std::size_t i = 0; i < n; ++i) {
    weight[i] = static_cast<std::size_t>(std::nearbyint(memory[i] * kScale));
  }
  std::vector<float> best(cap + 1, 0.0F);
  std::vector<std::vector<bool>> took(n, std::vector<bool>(cap + 1, false));
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<float>(value[i]);
    for (std::size_t j = cap + 1; j-- > weight[i];) {
      const float with = best[j - weight[i]] + v;
      if (with > best[j]) {
        best[j] = with;
        took[i][j] = true;
      }
    }
  }
  std::vector<bool> saved(n, false);
  std::size_t j = cap;
  for (std::size_t i = n; i-- > 0;) {
    if (took[i][j]) {
      saved[i] = true;
      j -= weight[i];
    }
  }
  return saved;
}

// The step's inputs as the partitioner's graph has them (its primals): the tensors forward reads
// that no op of the step writes (parameters, buffers, the batch).
std::vector<sim::TensorId> step_inputs(const sim::Workload& w) {
  std::vector<bool> seen(w.tensors.size(), false);
  std::vector<sim::TensorId> out;
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kForward) continue;
    for (sim::TensorId t : op.inputs) {
      const sim::Tensor& tensor = w.tensor(t);
      if (tensor.producer != sim::kNoOp || seen[sim::index(t)]) continue;
      if (tensor.kind != sim::TensorKind::kParameter && tensor.kind != sim::TensorKind::kInput) {
        continue;
      }
      seen[sim::index(t)] = true;
      out.push_back(t);
    }
  }
  return out;
}

// The bytes PyTorch's graph saves for a map eager keeps whole, where AOTAutograd's decompositions
// make that smaller: a max-pool's int64 indices become int8 offsets
// (`_low_memory_max_pool2d_with_offsets`), and its backward no longer reads its input; a map that
// only ReLU's or ReLU6's backward reads then (`threshold_backward`, `hardtanh_backward`: a
// `where` on a comparison with it) costs the min-cut at most that comparison's bool mask, one byte
// an element; a map no backward op reads then costs nothing. Other maps, and maps without a
// shape, count their bytes. These sizes only weigh a plan against the budget: the plan still
// keeps eager's maps whole (Note [The memory-budget partitioner in a plan]).
std::vector<double> partitioner_bytes(const NetworkView& view) {
  const sim::Workload& w = view.workload();
  enum Read : std::uint8_t { kNone = 0, kMask = 1, kWhole = 2 };
  std::vector<std::uint8_t> read(view.feature_maps().size(), kNone);
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kBackward) continue;
    const sim::Op* of = op.differentiates == sim::kNoOp ? nullptr : &w.op(op.differentiates);
    const sim::Layer layer = of == nullptr ? sim::Layer::kGeneric : of->layer.kind();
    for (sim::TensorId t : op.inputs) {
      const int m = view.map_index(t);
      if (m < 0) continue;
      const bool pool_input =
          of != nullptr && of->layer.rule().family == sim::LayerFamily::kMaxPool &&
          std::find(of->inputs.begin(), of->inputs.end(), t) != of->inputs.end();
      if (pool_input) continue;
      read[m] |= layer == sim::Layer::kRelu || layer == sim::Layer::kRelu6 ? kMask : kWhole;
    }
  }
  std::vector<double> out;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    const auto map = static_cast<int>(m);
    const sim::Tensor& tensor = w.tensor(view.feature_maps()[m].tensor);
    const sim::Op& producer = w.op(view.producer(map));
    const auto n = static_cast<double>(elements(tensor.shape));
    const bool indices = producer.layer.rule().family == sim::LayerFamily::kMaxPool &&
                         producer.outputs.size() > 1 && producer.outputs.front() != tensor.id;
    double bytes = static_cast<double>(view.map_bytes(map));
    if (!tensor.shape.empty() && indices) {
      bytes = n;
    } else if (!tensor.shape.empty() && read[m] == kMask) {
      bytes = std::min(bytes, n);
    } else if (read[m] == kNone) {
      bytes = 0;
    }
    out.push_back(bytes);
  }
  return out;
}

// Saved sizes as `choose_saved_values_set` measures them, the step's inputs counted: a plan's is
// its kept maps' bytes as PyTorch's graph saves them (partitioner_bytes) and those of the inputs
// that are no map but that backward or a recomputation reads; the least is every input's (what
// budget 0 saves).
class SavedSizes {
 public:
  SavedSizes(const NetworkView& view, const std::vector<Role>& role)
      : view_(&view),
        role_(&role),
        inputs_(step_inputs(view.workload())),
        bytes_(partitioner_bytes(view)),
        read_in_backward_(view.workload().tensors.size(), false) {
    const sim::Workload& w = view.workload();
    for (const sim::Op& op : w.ops) {
      if (op.phase != sim::Phase::kBackward) continue;
      for (sim::TensorId t : op.inputs) read_in_backward_[sim::index(t)] = true;
    }
    for (sim::TensorId t : inputs_) least_ += static_cast<double>(w.tensor(t).bytes);
  }

  [[nodiscard]] double least() const { return least_; }

  [[nodiscard]] double of(const sim::Plan& plan) const {
    const sim::Workload& w = view_->workload();
    double saved = 0;
    for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
      if (plan.decisions[m].action == sim::Action::kKeep && !free_statistic(plan, m)) {
        saved += bytes_[m];
      }
    }
    const std::vector<bool> rerun = sim::ops_rerun_by_recompute(plan, w);
    std::vector<bool> reread(w.tensors.size(), false);
    for (const sim::Op& op : w.ops) {
      if (!rerun[sim::index(op.id)]) continue;
      for (sim::TensorId t : op.inputs) reread[sim::index(t)] = true;
    }
    for (sim::TensorId t : inputs_) {
      if (view_->map_index(t) < 0 && (read_in_backward_[sim::index(t)] || reread[sim::index(t)])) {
        saved += static_cast<double>(w.tensor(t).bytes);
      }
    }
    return saved;
  }

 private:
  // A normalisation's statistics that are no reduction cost nothing while the cut saves its data
  // input: the min-cut recomputes them from it (at budget 1, ResNet's layer3 and layer4).
  [[nodiscard]] bool free_statistic(const sim::Plan& plan, std::size_t m) const {
    if ((*role_)[m] != Role::kPointwise) return false;
    const sim::TensorId data = statistic_of(*view_, static_cast<int>(m));
    if (data == sim::kNoTensor) return false;
    const int input = view_->map_index(data);
    return input < 0 ? std::find(inputs_.begin(), inputs_.end(), data) != inputs_.end()
                     : plan.decisions[static_cast<std::size_t>(input)].action == sim::Action::kKeep;
  }

  const NetworkView* view_;
  const std::vector<Role>* role_;
  std::vector<sim::TensorId> inputs_;
  std::vector<double> bytes_;  // each map's, as PyTorch's graph saves it
  std::vector<bool> read_in_backward_;
  double least_ = 0;
};

// The knapsack items' values. A compute-intensive item is worth its op's FLOPs, a copy of a
// matmul's output its share of the matmul's; if an op's FLOPs are not known, every
// compute-intensive item is worth its op's duration instead. The others are worth 1:
// FlopCounterMode counts no FLOPs for a reduction or a random op, and the estimate is at least 1.
std::vector<double> knapsack_values(const NetworkView& view, const std::vector<Role>& role,
                                    const std::vector<std::size_t>& items) {
  const sim::Workload& w = view.workload();
  std::vector<double> flops;
  std::vector<double> duration;
  bool all_flops = true;
  for (std::size_t m : items) {
    flops.push_back(1);
    duration.push_back(1);
    if (role[m] != Role::kComputeIntensive) continue;
    const sim::Op& producer = w.op(view.producer(static_cast<int>(m)));
    const sim::OpId copied = copied_compute_op(w, producer);
    const sim::Op& op = copied == sim::kNoOp ? producer : w.op(copied);
    // A copy carries the share of the matmul's output it copies.
    const auto map_bytes = static_cast<double>(view.map_bytes(static_cast<int>(m)));
    const auto op_bytes = static_cast<double>(w.tensor(op.outputs.front()).bytes);
    const double share =
        copied == sim::kNoOp || op_bytes == 0 ? 1.0 : std::min(1.0, map_bytes / op_bytes);
    const std::optional<double> f = flops_of(w, op);
    all_flops = all_flops && f.has_value();
    flops.back() = std::max(f.value_or(0) * share, 1.0);
    duration.back() = std::max(static_cast<double>(op.duration_ns) * share, 1.0);
  }
  return all_flops ? flops : duration;
}

}  // namespace

sim::Plan partitioner_plan(const NetworkView& view, double budget) {
  const std::vector<Role> role = roles(view);
  sim::Plan plan = keep_all(view, "budget-partitioner");
  if (budget >= 1) return plan;  // the runtime-optimal cut: what eager autograd saves
  const auto bytes = [&](std::size_t m) {
    return static_cast<double>(view.map_bytes(static_cast<int>(m)));
  };
  const auto recompute = [&](std::initializer_list<Role> which) {
    for (std::size_t m = 0; m < role.size(); ++m) {
      if (std::find(which.begin(), which.end(), role[m]) != which.end()) {
        plan.decisions[m].action = sim::Action::kRecompute;
      }
    }
  };
  if (budget <= 0) {  // only the inputs saved
    recompute(
        {Role::kPointwise, Role::kRandom, Role::kReduction, Role::kComputeIntensive, Role::kOther});
    return plan;
  }
  const SavedSizes sizes(view, role);
  const double min_bytes = sizes.least();
  const double max_bytes = sizes.of(plan);
  // Budget 1's cut saves no more than the inputs: PyTorch keeps it at every budget above 0.
  if (max_bytes <= min_bytes) return plan;
  const auto ratio = [&] { return (sizes.of(plan) - min_bytes) / (max_bytes - min_bytes); };
  recompute({Role::kPointwise});  // the allowlist's ops, used far apart or not
  if (ratio() < budget) return plan;
  recompute({Role::kOther});  // the allowlist off: what is banned is random, reductions, matmuls
  if (ratio() < budget) return plan;
  // The knapsack over what the last cut bans, largest first (a stable sort, so ties keep the
  // maps' order).
  std::vector<std::size_t> items;
  for (std::size_t m = 0; m < role.size(); ++m) {
    if (role[m] == Role::kComputeIntensive || role[m] == Role::kReduction ||
        role[m] == Role::kRandom) {
      items.push_back(m);
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [&](std::size_t a, std::size_t b) { return bytes(a) > bytes(b); });
  std::vector<double> memory(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    memory[i] = bytes(items[i]) / (max_bytes - min_bytes);
  }
  const std::vector<bool> saved = dp_knapsack(memory, knapsack_values(view, role, items), budget);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!saved[i]) plan.decisions[items[i]].action = sim::Action::kRecompute;
  }
  return plan;
}

PolicyDecision decide_budget_partitioner(Evaluator& evaluator, const NetworkView& view) {
  int tenths = 10;
  sim::Plan plan = partitioner_plan(view, 1.0);
  while (tenths > 0 && !evaluator.cost(plan).feasible) {
    --tenths;
    plan = partitioner_plan(view, tenths / 10.0);
  }
  return {std::move(plan), false, fmt::format("activation_memory_budget {:.1f}", tenths / 10.0)};
}

}  // namespace memplan::search
