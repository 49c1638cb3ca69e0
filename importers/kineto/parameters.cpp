// Parameters and optimizer state: each forward layer's weights (batch norm's running statistics
// are parameters too, but not trainable), the state the optimizer keeps per trainable parameter,
// persistent .grad buffers when zero_grad zeroes them, and the leaves autograd accounts for.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "importers/kineto/step_builder.hpp"

// Note [Leaves from AccumulateGrad]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch accumulates the gradient of every leaf tensor that requires grad through one
// AccumulateGrad node per leaf and backward pass, and the profiler records the node with the
// gradient's shape, which is the leaf's. So the AccumulateGrad nodes of a step are its trainable
// parameters by PyTorch's own account, whatever ops read them (a tied weight is one leaf: one
// node). The layer rules find the parameters of the layers they know (a linear's weight and bias,
// a norm's affine); a leaf they leave unaccounted for is a weight some other op reads: an
// embedding's table, a matrix given to mm. The trace records no tensor identities, so such a leaf
// is matched by shape (and dtype) to a pre-existing input a forward op reads, which becomes a
// parameter (optimizer state, a gradient from that op's backward), once the forward is built
// (settle_parameters). The report compares the parameters with the leaves; where a tied weight is
// read as a parameter by one op and as an input by another, the bytes still agree (one leaf, one
// parameter), the input stays an input. A layer rule's parameter that no leaf stands for is left
// trainable: it may be frozen (fine-tuning), but a flat parameter (FSDP) is one leaf that the
// layers read through views of other shapes, and the shapes alone cannot tell the two apart.

namespace memplan::importers::detail {

using sim::OpId;
using sim::TensorId;
using sim::TensorKind;

TensorId StepBuilder::param(const std::string& name, const Shape& shape, const std::string& dtype,
                            bool trainable) {
  const TensorId p = add_tensor(name, TensorKind::kParameter, shape, dtype, sim::kNoOp);
  if (trainable) make_trainable(p);
  return p;
}

void StepBuilder::make_trainable(TensorId p) {
  trainable_.push_back(p);
  const std::string name = tensor(p).name;  // add_tensor moves the tensors
  const Shape shape = tensor(p).shape;
  const std::string dtype = tensor(p).dtype;
  for (const std::string& state : roles_.state_names) {
    optimizer_state_.push_back(add_tensor(fmt::format("{}.{}", name, state),
                                          TensorKind::kOptimizerState, shape, dtype, sim::kNoOp));
    states_of_[p].push_back(optimizer_state_.back());
  }
  if (roles_.persistent_grads) {
    param_grad_[p] =
        add_tensor(name + ".grad", TensorKind::kOptimizerState, shape, dtype, sim::kNoOp);
  }
}

void StepBuilder::settle_parameters() {
  // The layer rules' parameters take their leaves first.
  std::vector<Leaf> left = roles_.leaves;
  auto take = [&left](const Shape& shape, const std::string& dtype) {
    const auto it = std::find_if(left.begin(), left.end(), [&](const Leaf& l) {
      return l.shape == shape && l.dtype == dtype;
    });
    if (it == left.end()) return false;
    left.erase(it);
    return true;
  };
  for (TensorId p : trainable_) take(tensor(p).shape, tensor(p).dtype);
  // A leaf left over: an input of that shape a forward op reads (in issue order, argument order).
  std::vector<OpId> order;
  for (const auto& entry : forward_) order.push_back(entry.first);
  std::sort(order.begin(), order.end());
  std::vector<TensorId> promoted;
  for (OpId o : order) {
    int of_op = 0;  // mm(a, b) with two leaves: .weight, .weight1
    for (TensorId x : op(o).inputs) {
      sim::Tensor& t = workload_.tensors[index(x)];
      if (t.kind != TensorKind::kInput || !take(t.shape, t.dtype)) continue;
      t.kind = TensorKind::kParameter;
      t.name = of_op == 0 ? fmt::format("{}.weight", op(o).name)
                          : fmt::format("{}.weight{}", op(o).name, of_op);
      ++of_op;
      promoted.push_back(x);
    }
  }
  for (TensorId x : promoted) {
    make_trainable(x);
    for (auto& [reader, info] : forward_) {  // a parameter of every forward op that reads it
      const auto& in = op(reader).inputs;
      if (std::find(in.begin(), in.end(), x) != in.end()) info.params.push_back(x);
    }
  }
  report_.promoted_leaves = promoted.size();
}

// FSDP's shard of each trainable parameter, its optimizer state and its persistent .grad: dim 0
// split over `ranks`, padded to equal shards (FSDP2's Shard(0); FSDP1 shards a flat
// concatenation, the same bytes but for the padding). Note [FSDP in a trace].
void StepBuilder::shard_parameters(std::int64_t ranks) {
  auto shard = [&](TensorId id) {
    sim::Tensor& t = workload_.tensors[index(id)];
    if (t.shape.empty() || t.shape[0] <= 0) return;
    t.shape[0] = (t.shape[0] + ranks - 1) / ranks;
    t.bytes = checked_bytes(t.shape, sim::dtype_bytes(t.dtype).value_or(4),
                            fmt::format("{}: tensor '{}'", trace_.source, t.name));
  };
  for (TensorId p : trainable_) {
    shard(p);
    report_.fsdp_shard_bytes += tensor(p).bytes;
    for (TensorId s : states_of_[p]) shard(s);
    if (roles_.persistent_grads) shard(param_grad_.at(p));
  }
}

// The imported trainable parameters beside what the optimizer's own ops say, when they record
// tensor lists. Tensor lists record no dtype: their elements are sized with the parameters' dtype.
void StepBuilder::check_parameters_against_optimizer() {
  std::string dtype = "float32";
  for (TensorId p : trainable_) {
    report_.trainable_parameters += 1;
    report_.trainable_parameter_bytes += tensor(p).bytes;
    dtype = tensor(p).dtype;
  }
  report_.leaf_tensors = roles_.leaves.size();
  for (const Leaf& l : roles_.leaves) {
    report_.leaf_bytes += checked_bytes(l.shape, sim::dtype_bytes(l.dtype).value_or(4),
                                        trace_.source + ": AccumulateGrad");
  }
  if (roles_.optimizer_list.empty()) return;
  report_.optimizer_shape_tensors = roles_.optimizer_list.size();
  for (const Shape& shape : roles_.optimizer_list) {
    report_.optimizer_shape_bytes += checked_bytes(shape, sim::dtype_bytes(dtype).value_or(4),
                                                   trace_.source + ": optimizer tensor list");
  }
}

}  // namespace memplan::importers::detail
