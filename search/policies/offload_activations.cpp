// Activation offloading as torchtune runs it (torchtune.training.OffloadActivations, a
// saved-tensors-hooks context around the model's forward).
//
// Note [torchtune's activation offloading]
// Its pack hook numbers every tensor autograd saves under it, one number per save whatever the
// tensor (a parameter, a 64-byte statistic, a storage saved by two ops twice). It copies to pinned
// host memory, on a side stream, each saved tensor of at least `min_offload_size` bytes (1,024)
// that is not a parameter or buffer, and keeps the device tensor alive in a forward stash; before
// each such copy it drops from the stash every tensor numbered `max_fwd_stash_size` (5) or more
// below the new one (the compute stream waits for its copy), and the device tensor goes when the
// stash lets it go and forward is done with it. In backward, a tensor still in the stash is handed
// back from it; the first backward node that unpacks an offloaded tensor empties the stash when it
// finishes; any other is copied back when the backward op that reads it asks for it, on the side
// stream, and the compute stream waits for the copy: there is no prefetch ahead.
//
// In a plan: every feature map of 1,024 bytes or more is swapped and prefetched before its first
// backward use (an on-demand fetch, which the reader waits for). Its device copy is released after
// its last forward use and before the op at whose save the stash drops its last save of it. Saves
// are read from the trace: a forward op's are the forward tensors that the backward ops
// differentiating it read, its inputs saved before it and its outputs after it, in autograd's
// order by argument name told by role (a bias, the data, buffers, the weight); a map no such op
// reads is saved after its producer. A save of at least 1,024 bytes triggers the drops unless it
// is a parameter as saved: a parameter of which forward takes a view (an op that reads it and
// writes nothing: `weight.t()`) is none, nor is a buffer (a parameter no update reads, in a step
// whose update reads parameters: `register_buffer`'s tensors are no nn.Buffer). A map still
// stashed when forward ends is released after the first backward node that reads an offloaded
// save, and kept when that node reads it itself (the stash hands it back; nothing comes back from
// the host).
//
// What the trace does not say, and the emulation therefore does not do as torchtune does
// (python/tests/test_torchtune_offloading.py measures each against torchtune itself):
//  - the argument names: the role order is wrong for a product without bias (an mm saves its
//    "mat2", the weight, before its "self"), and one op saving one storage several times (an
//    attention's q, k and v, views of one in-projection) shows as one read; a drop then comes some
//    ops early or late;
//  - the saved view's own bytes: torchtune's threshold is on them, the plan's on the storage;
//  - the copies that are no feature map — views of parameters, buffers, the batch's inputs — and
//    the second copy of a storage saved twice: they count in the stash, but the plan moves none;
//  - where the hooks' context ends: torchtune's recipes wrap the model alone, while the trace's
//    forward runs the loss too, whose maps the plan swaps as well.
// What torchtune cannot see: which maps are cheap to recompute, how long the link takes against
// the compute that could hide it, and the budget — it moves everything over the threshold,
// whether the step needed it or not.
#include <fmt/core.h>

#include <algorithm>
#include <deque>
#include <tuple>

#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

constexpr sim::Bytes kMinOffloadBytes = 1024;
constexpr std::size_t kForwardStash = 5;

// One tensor autograd saves for a forward op: what the pack hook sees, in the order it sees them.
struct Save {
  sim::TensorId tensor;
  // The op before which the pack hook runs: autograd saves an op's inputs before the op runs and
  // its outputs after it.
  sim::OpId packed_before;
};

// A tensor the forward pass has for backward: written in forward, or there before the step.
bool forward_tensor(const sim::Workload& w, sim::TensorId t) {
  const sim::Tensor& tensor = w.tensor(t);
  if (tensor.kind == sim::TensorKind::kGradient ||
      tensor.kind == sim::TensorKind::kOptimizerState) {
    return false;
  }
  return tensor.producer == sim::kNoOp || w.op(tensor.producer).phase == sim::Phase::kForward;
}

// What the trace shows of each parameter: whether forward takes a view of it (an op that reads it
// and writes nothing: a linear layer's `weight.t()`, which its product saves), and whether it is
// a buffer (batch norm's running statistics: a parameter no update reads, in a step whose update
// reads parameters; the trace counts buffers as parameters).
class ParameterUses {
 public:
  explicit ParameterUses(const sim::Workload& w)
      : viewed_(w.tensors.size(), false), updated_(w.tensors.size(), false) {
    for (const sim::Op& op : w.ops) {
      const bool view = op.phase == sim::Phase::kForward && op.outputs.empty();
      updates_ = updates_ || op.phase == sim::Phase::kUpdate;
      for (const sim::TensorId t : op.inputs) {
        if (view) viewed_[index(t)] = true;
        if (op.phase == sim::Phase::kUpdate) updated_[index(t)] = true;
      }
    }
  }
  [[nodiscard]] bool viewed(sim::TensorId t) const { return viewed_[index(t)]; }
  [[nodiscard]] bool buffer(sim::TensorId t) const { return updates_ && !updated_[index(t)]; }

 private:
  std::vector<bool> viewed_;
  std::vector<bool> updated_;
  bool updates_ = false;
};

// Whether torchtune copies a save to the host: 1 KiB or more, and not an nn.Parameter as saved —
// a view of a parameter is none, and neither is a buffer registered with `register_buffer`.
bool offloaded(const sim::Workload& w, const ParameterUses& parameters, sim::TensorId t) {
  const sim::Tensor& tensor = w.tensor(t);
  if (tensor.bytes < kMinOffloadBytes) return false;
  return tensor.kind != sim::TensorKind::kParameter || parameters.viewed(t) || parameters.buffer(t);
}

// The saves of the step in pack order (Note [torchtune's activation offloading]).
std::vector<Save> saves_in_pack_order(const NetworkView& view, const ParameterUses& parameters) {
  const sim::Workload& w = view.workload();
  std::vector<Save> saves;
  std::vector<bool> saved(w.tensors.size(), false);
  for (const sim::OpId f : view.layers()) {
    std::vector<sim::TensorId> tensors;
    for (const sim::OpId b : view.backward_ops_of(f)) {
      for (const sim::TensorId t : w.op(b).inputs) {
        if (forward_tensor(w, t)) tensors.push_back(t);
      }
    }
    std::sort(tensors.begin(), tensors.end());
    tensors.erase(std::unique(tensors.begin(), tensors.end()), tensors.end());
    // Inputs before the op, outputs after it. Autograd saves an op's arguments in the order of
    // their names, which the trace does not hold; it is told by role: a bias ("bias"), the data
    // ("input", "mat1", "mat2", "self": the later tensor first), buffers ("running_mean",
    // "running_var"), the weight ("weight", or "mat2" for a linear layer's product, whose "mat1"
    // is its data) — right for layer norm, batch norm, convolutions, a linear layer's addmm and the
    // products of activations, not for a product of an activation and a weight without bias (mm:
    // its "mat2", the weight, comes before its "self").
    const auto output = [&](sim::TensorId t) { return w.tensor(t).producer == f; };
    const sim::Op& op = w.op(f);
    std::vector<sim::TensorId> weights;  // its saved parameters, not buffers, in argument order
    for (const sim::TensorId t : op.inputs) {
      if (w.tensor(t).kind == sim::TensorKind::kParameter && !parameters.buffer(t) &&
          std::binary_search(tensors.begin(), tensors.end(), t)) {
        weights.push_back(t);
      }
    }
    const auto order = [&](sim::TensorId t) {
      const int id = value(t);
      if (output(t)) return std::tuple(4, id);
      if (w.tensor(t).kind != sim::TensorKind::kParameter) return std::tuple(1, -id);
      if (parameters.buffer(t)) return std::tuple(2, id);
      const bool bias = std::find(weights.begin(), weights.end(), t) > weights.begin();
      return std::tuple(bias ? 0 : 3, id);
    };
    std::sort(tensors.begin(), tensors.end(),
              [&](sim::TensorId a, sim::TensorId b) { return order(a) < order(b); });
    for (const sim::TensorId t : tensors) {
      saves.push_back({t, output(t) ? f + 1 : f});
      saved[index(t)] = true;
    }
  }
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    const sim::TensorId t = view.feature_maps()[m].tensor;
    const sim::OpId producer = view.producer(static_cast<int>(m));
    if (!saved[index(t)]) saves.push_back({t, producer + 1});
  }
  std::stable_sort(saves.begin(), saves.end(),
                   [](const Save& a, const Save& b) { return a.packed_before < b.packed_before; });
  return saves;
}

// The first and the last op of the first backward node that reads an offloaded save (torchtune's
// hook empties the forward stash when that node finishes); kNoOp for both when none does.
std::pair<sim::OpId, sim::OpId> first_unpacking_node(const sim::Workload& w,
                                                     const std::vector<bool>& offloaded_save) {
  for (const sim::Op& op : w.ops) {
    if (op.phase != sim::Phase::kBackward) continue;
    const bool reads = std::any_of(op.inputs.begin(), op.inputs.end(),
                                   [&](sim::TensorId t) { return offloaded_save[index(t)]; });
    if (!reads) continue;
    sim::OpId last = op.id;
    while (!sim::ends_backward_node(w, last)) ++last;
    return {op.id, last};
  }
  return {sim::kNoOp, sim::kNoOp};
}

}  // namespace

PolicyDecision decide_offload_activations(Evaluator& /*evaluator*/, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "offload-activations");
  const ParameterUses parameters(w);
  const std::vector<Save> saves = saves_in_pack_order(view, parameters);

  // The forward stash: numbers of offloaded saves and their tensors, oldest first. dropped[t]:
  // the op before which the stash has let go of every save of tensor t (kNoOp: not yet).
  std::deque<std::pair<std::size_t, sim::TensorId>> stash;
  std::vector<int> stashed(w.tensors.size(), 0);
  std::vector<sim::OpId> dropped(w.tensors.size(), sim::kNoOp);
  std::vector<bool> offloaded_save(w.tensors.size(), false);
  for (std::size_t number = 0; number < saves.size(); ++number) {
    const Save& save = saves[number];
    if (!offloaded(w, parameters, save.tensor)) continue;
    while (!stash.empty() && stash.front().first + kForwardStash <= number) {
      const sim::TensorId t = stash.front().second;
      stash.pop_front();
      if (--stashed[index(t)] == 0) dropped[index(t)] = save.packed_before;
    }
    stash.emplace_back(number, save.tensor);
    ++stashed[index(save.tensor)];
    dropped[index(save.tensor)] = sim::kNoOp;
    offloaded_save[index(save.tensor)] = true;
  }
  const auto [node_first, node_last] = first_unpacking_node(w, offloaded_save);

  std::size_t swapped = 0;
  std::size_t from_stash = 0;
  for (std::size_t m = 0; m < plan.decisions.size(); ++m) {
    const sim::FeatureMap& map = view.feature_maps()[m];
    if (view.map_bytes(static_cast<int>(m)) < kMinOffloadBytes) continue;
    sim::Decision& d = plan.decisions[m];
    const sim::OpId first_use = map.backward_uses.front();
    sim::OpId released = dropped[index(map.tensor)];
    if (stashed[index(map.tensor)] > 0) {  // still in the stash when forward ends
      if (node_first != sim::kNoOp && first_use <= node_last) {
        ++from_stash;  // handed back from the stash: kept
        continue;
      }
      released = node_last != sim::kNoOp ? node_last + 1 : first_use;
    }
    d.action = sim::Action::kSwap;
    d.prefetch_before = first_use;
    const sim::OpId after_forward = sim::last_forward_use(map, w) + 1;
    d.release_before = std::min(std::max(after_forward, released), first_use);
    ++swapped;
  }
  return {std::move(plan), false,
          fmt::format("{} maps of 1 KiB or more swapped, fetched when backward reads them; {} "
                      "handed back from the forward stash",
                      swapped, from_stash)};
}

}  // namespace memplan::search
