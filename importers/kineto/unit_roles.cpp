#include "importers/kineto/unit_roles.hpp"

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/aten_layers.hpp"

namespace memplan::importers::detail {

namespace {

using sim::Layer;

// The per-parameter state PyTorch's optimizers keep (their `state[p]` tensors, shaped like the
// parameter), by the lower-cased class name of `Optimizer.step#Class.step`: the Adam family
// (Adam, AdamW, NAdam, RAdam, Adamax, apex/DeepSpeed FusedAdam, LAMB) keeps two moments, Adadelta
// two accumulators, Rprop the previous gradient and the step sizes, Adagrad a sum, RMSprop the
// squared average, SGD a momentum buffer only with momentum (its update then multiplies: mul_).
std::vector<std::string> optimizer_state_names(std::string_view cls, bool multiplies) {
  auto has = [&](std::string_view part) { return cls.find(part) != std::string_view::npos; };
  if (has("adam") || has("lamb")) return {"exp_avg", "exp_avg_sq"};
  if (has("adadelta")) return {"square_avg", "acc_delta"};
  if (has("rprop")) return {"prev", "step_size"};
  if (has("adagrad")) return {"sum"};
  if (has("rmsprop")) return {"square_avg"};
  if (has("sgd") && multiplies) return {"momentum"};
  return {};
}

// Walks of one event's subtree (the event and everything nested in it on its thread).
class Subtree {
 public:
  Subtree(const KinetoTrace& trace, const Nesting& nesting) : trace_(trace), nesting_(nesting) {}

  /// Some event of the subtree has `needle` in its name.
  [[nodiscard]] bool has(std::size_t root, std::string_view needle) const {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = pop(todo);
      if (trace_.cpu_events[i].name.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  /// Every sequence number recorded in the subtree.
  void sequences(std::size_t root, std::set<std::int64_t>& out) const {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      if (auto s = trace_.cpu_events[pop(todo)].sequence_number) out.insert(*s);
    }
  }

  /// The first sequence number breadth first: a backward node's own, or its first op's.
  [[nodiscard]] std::optional<std::int64_t> first_sequence(std::size_t root) const {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = todo.front();
      todo.erase(todo.begin());
      if (auto s = trace_.cpu_events[i].sequence_number) return s;
      todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    }
    return std::nullopt;
  }

  /// The sequence number of the node a CopySlices node wraps (an in-place op on a view: autograd
  /// runs the op's own node inside it), breadth first below the CopySlices events.
  [[nodiscard]] std::optional<std::int64_t> wrapped_sequence(std::size_t root) const {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = todo.front();
      todo.erase(todo.begin());
      const CpuEvent& e = trace_.cpu_events[i];
      if (e.name.find("CopySlices") == std::string::npos && e.sequence_number)
        return e.sequence_number;
      todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    }
    return std::nullopt;
  }

  /// The leaf an AccumulateGrad node accumulated into: the first recorded shape depth first.
  [[nodiscard]] std::optional<Leaf> leaf(std::size_t node) const {
    std::vector<std::size_t> todo{node};
    while (!todo.empty()) {
      const CpuEvent& e = trace_.cpu_events[pop(todo)];
      if (!e.input_dims.empty() && !e.input_dims.front().empty())
        return Leaf{e.input_dims.front(), dtype_of(e, 0)};
    }
    return std::nullopt;
  }

  /// The parameter-shaped tensor list of a foreach or fused optimizer step (PyTorch >= 1.13's
  /// `_foreach_*` / `_fused_adam(w)_` ops take params, grads and states as lists of equal shapes;
  /// the step counters are a list of scalars): the list with the most elements in the subtree.
  [[nodiscard]] std::vector<Shape> widest_tensor_list(std::size_t root) const {
    std::vector<Shape> widest;
    std::size_t widest_elements = 0;
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      for (const auto& list : trace_.cpu_events[pop(todo)].input_lists) {
        std::size_t elements = 0;
        for (const Shape& shape : list) elements += numel(shape);
        if (elements > widest_elements) {
          widest = list;
          widest_elements = elements;
        }
      }
    }
    return widest;
  }

 private:
  // Depth first: the last event to visit, its children queued after it.
  std::size_t pop(std::vector<std::size_t>& todo) const {
    const std::size_t i = todo.back();
    todo.pop_back();
    todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    return i;
  }

  const KinetoTrace& trace_;
  const Nesting& nesting_;
};

// Any argument is a tensor of rank 2 or more: the generic rule keeps such an op.
bool reads_matrix(const CpuEvent& e) {
  for (const Shape& s : e.input_dims) {
    if (s.size() >= 2) return true;
  }
  return false;
}

// The recorded shapes fit what forward_ops.cpp's rule for `layer` reads.
bool fits(Layer layer, const CpuEvent& e) {
  const Shape& x = dims(e, 0);
  switch (layer) {
    case Layer::kBatchNorm:
      return x.size() >= 2;
    case Layer::kLayerNorm:
    case Layer::kRelu:
      return !x.empty();
    case Layer::kMaxPool2d:
    case Layer::kAvgPool2d:
    case Layer::kAdaptiveAvgPool:
      return x.size() >= 3;
    case Layer::kLinear:  // addmm(bias, x, weight), linear(x, weight, bias)
      return !x.empty() && dims(e, ends_with(e.name, "addmm") ? 2 : 1).size() == 2;
    case Layer::kAdd:
      return !x.empty() && dims(e, 1) == x;
    case Layer::kSoftmaxCrossEntropy:
      return x.size() == 2;
    case Layer::kConcat:  // cat(tensors, dim): its tensors are a recorded list
      return !e.input_lists.empty() && !e.input_lists.front().empty() &&
             e.input_lists.front().front().size() >= 2;
    default:
      return reads_matrix(e);
  }
}

// Views and device copies: the tensor they read, not an op.
Unit::Alias alias_of(std::string_view name) {
  if (name == "flatten" || name == "view" || name == "reshape" || name == "_unsafe_view")
    return Unit::Alias::kView;
  if (name == "to" || name == "_to_copy" || name == "contiguous" || name == "detach" ||
      name == "copy_")
    return Unit::Alias::kCopy;
  return Unit::Alias::kNone;
}

// Whether the recorded shapes let forward_ops.cpp build the op (`row`: its forward row, if any):
// a convolution and an alias are marked on `u`.
bool builds(const CpuEvent& e, const sim::AtenLayer* row, Layer layer, Unit& u) {
  if (row != nullptr && row->test == sim::AtenTest::kWeightRank) {
    const Shape& x = dims(e, 0);
    const Shape& w = dims(e, static_cast<std::size_t>(row->argument));
    u.convolution = x.size() >= 3 && w.size() == x.size();
    return u.convolution;
  }
  if (row == nullptr) {
    Unit::Alias alias = alias_of(std::string_view(e.name).substr(kAtenPrefix.size()));
    // Any other view whose output shape its recorded arguments give (transpose, permute, select,
    // chunk...): the same tensor under that shape. Without them it stays a generic op.
    if (alias == Unit::Alias::kNone && is_view_op(e.name) && view_shape(e) &&
        !ends_with(e.name, "pad") && !ends_with(e.name, "pad_nd"))
      alias = Unit::Alias::kView;
    if (alias != Unit::Alias::kNone) {
      u.alias = alias;
      return !dims(e, 0).empty();
    }
  }
  // A row whose test says no layer (hardtanh with bounds the profiler did not record) leaves the
  // op to the generic rule.
  return layer == Layer::kGeneric ? reads_matrix(e) : fits(layer, e);
}

// A forward-pass event: a forward op with its layer (an alias, or without shapes an op known by
// its name and time only), or glue (its role unchanged).
void classify_forward(const CpuEvent& e, bool time_only, Unit& u) {
  if (!starts_with(e.name, kAtenPrefix)) return;
  const sim::AtenLayer* row = sim::find_aten_layer(e.name);
  if (row != nullptr && row->backward) row = nullptr;
  const Layer layer = row != nullptr ? sim::aten_layer(*row, aten_arguments(e)) : Layer::kGeneric;
  u.layer = layer == Layer::kGeneric ? sim::LayerType::named(aten_short_name(e.name))
                                     : sim::LayerType(layer);
  if (time_only || builds(e, row, layer, u)) {
    u.role = Unit::Role::kForward;
  } else if (layer == Layer::kAdd && reads_matrix(e)) {
    // An add of two tensors of different shapes (a broadcast: x + a position embedding) is no
    // residual add: a generic op, which broadcasts its operands, under its full aten name as the
    // capture names it (the short name is the add layer's).
    u.layer = sim::LayerType::named(e.name);
    u.role = Unit::Role::kForward;
  }
}

// `Optimizer.step#AdamW.step` -> "adamw" with its state; the last of several steps wins.
void read_optimizer(const Subtree& subtree, const CpuEvent& e, std::size_t event,
                    StepRoles& roles) {
  const auto hash = e.name.find('#');
  std::string cls = e.name.substr(hash == std::string::npos ? 0 : hash + 1);
  cls = cls.substr(0, cls.find('.'));
  roles.optimizer_name.clear();
  for (char ch : cls)
    roles.optimizer_name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  roles.state_names = optimizer_state_names(roles.optimizer_name, subtree.has(event, "mul_"));
  roles.optimizer_list = subtree.widest_tensor_list(event);
  if (roles.optimizer_name.empty()) roles.optimizer_name = "optimizer";
}

}  // namespace

StepRoles classify_units(const KinetoTrace& trace, const Nesting& nesting, bool time_only,
                         std::vector<Unit>& units) {
  const Subtree subtree(trace, nesting);
  StepRoles roles;
  bool backward_started = false;
  for (Unit& u : units) {
    const CpuEvent& e = trace.cpu_events[u.event];
    const std::string node = backward_node(e.name);
    if (starts_with(e.name, "Optimizer.step")) {
      u.role = Unit::Role::kUpdate;
      read_optimizer(subtree, e, u.event, roles);
    } else if (starts_with(e.name, "Optimizer.zero_grad")) {
      if (subtree.has(u.event, "aten::zero_")) roles.persistent_grads = true;
    } else if (!node.empty()) {
      backward_started = true;
      if (ends_with(node, "AccumulateGrad")) {
        ++roles.leaf_nodes;
        if (auto leaf = subtree.leaf(u.event)) roles.leaves.push_back(std::move(*leaf));
      } else {
        u.role = Unit::Role::kBackward;
        // A CopySlices node is the in-place op's own node, run on the view's base.
        u.sequence = ends_with(node, "CopySlices") ? subtree.wrapped_sequence(u.event)
                     : e.sequence_number           ? e.sequence_number
                                                   : subtree.first_sequence(u.event);
      }
    } else if (!backward_started) {
      classify_forward(e, time_only, u);
      if (u.alias != Unit::Alias::kNone && subtree.has(u.event, "aten::clone")) {
        // reshape or contiguous of a tensor that is not contiguous (a transpose's) copies it:
        // a new tensor (a generic op that keeps nothing), not a view of the old.
        u.alias = Unit::Alias::kNone;
        u.layer = sim::LayerType::named(aten_short_name(e.name));
      }
      if (u.role == Unit::Role::kForward) subtree.sequences(u.event, u.sequences);
    }
  }
  return roles;
}

}  // namespace memplan::importers::detail
