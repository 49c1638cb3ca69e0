// The backward ops and the optimizer step: each forward op's first backward node becomes its
// backward op, which reads the output's gradient and what the forward op saved and writes the
// gradients of its data inputs and parameters; at a fork (a tensor read by several ops) the later
// contribution reads the earlier gradient and replaces it (the sum), and an add passes its
// gradient through to both inputs. The update reads every trainable parameter, its gradient and
// its optimizer state.
#include <optional>
#include <set>
#include <string>

#include "importers/kineto/saturating_add.hpp"
#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

using sim::OpId;
using sim::TensorId;
using sim::TensorKind;

void StepBuilder::contribute_gradient(TensorId forward_tensor, TensorId grad, OpId o) {
  auto it = grad_of_.find(forward_tensor);
  if (it != grad_of_.end()) {
    // A fork: the tensor was read by several ops, its gradient is the sum of their contributions.
    add_input(o, it->second);
    it->second = grad;
  } else {
    grad_of_[forward_tensor] = grad;
  }
}

// Note [What needs a gradient]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Autograd keeps an operand of a product only for the other operand's gradient (derivatives.yaml:
// mul saves `other` if `self` requires grad, and `self` if `other` does). An activation requires
// grad when the op that wrote it made an autograd node; what ops without a node made
// (stochastic depth's and dropout's noise, an attention mask) does not. Parameters and inputs
// are taken to (the importer cannot tell a frozen parameter from a trained one). Which forward ops
// made a node the trace says once the forward pass is over: each backward node's sequence number
// names the last forward op that recorded it (settle_nodes; a view recorded after it took the
// number: its node is the view's, Note [Kineto dataflow]). So Swin's `x * noise` keeps the noise
// alone, not its [N, H, W, C] input.
void StepBuilder::settle_nodes() {
  std::set<std::int64_t> nodes;
  for (const Unit& u : units_) {
    if (u.role == Unit::Role::kBackward && u.sequence) nodes.insert(*u.sequence);
  }
  for (const auto& [sequence, o] : op_of_sequence_) {
    if (nodes.count(sequence) != 0) differentiable_.insert(o);
  }
}

// Whether `t` may require grad: false only for an activation whose producer made no node. A
// parameter or an input is taken to (a leaf the rules could not pair is an input; a frozen one is
// not known), as is an activation of an op outside the forward pass's numbering.
bool StepBuilder::needs_gradient(TensorId t) const {
  const sim::Tensor& x = tensor(t);
  if (x.kind != TensorKind::kActivation || x.producer == sim::kNoOp) return true;
  return forward_.count(x.producer) == 0 || differentiable_.count(x.producer) != 0;
}

void StepBuilder::build_backward(Unit& unit) {
  std::optional<OpId> f;
  if (unit.sequence) {
    if (auto it = op_of_sequence_.find(*unit.sequence); it != op_of_sequence_.end()) f = it->second;
  }
  if (!f) {
    // A node of an op that is not a layer op (a view, a transpose) or of a forward op outside the
    // step: its time goes to the previous backward op.
    ++report_.unmatched_backward;
    fold(unit);
    return;
  }
  ForwardInfo& info = forward_.at(*f);
  if (info.has_backward) {
    fold(unit);
    return;
  }
  info.has_backward = true;
  const OpId o = add_op(info.name + "_bwd", op(*f).layer, sim::Phase::kBackward, unit);
  op(o).differentiates = *f;
  TensorId gy = sim::kNoTensor;
  if (auto it = grad_of_.find(info.output); it != grad_of_.end()) {
    gy = it->second;
    add_input(o, gy);
  }
  for (std::size_t k = 0; k < info.saved.size(); ++k) {
    const auto& needed_by = k < info.saved_for.size() ? info.saved_for[k] : std::vector<TensorId>{};
    if (needed_by.empty() || std::any_of(needed_by.begin(), needed_by.end(),
                                         [&](TensorId x) { return needs_gradient(x); }))
      add_input(o, info.saved[k]);
  }
  for (TensorId x : info.data_inputs) {
    if (info.layer == sim::Layer::kAdd && grad_of_.count(x) == 0 && gy != sim::kNoTensor) {
      grad_of_[x] = gy;  // passed through unchanged; only a fork needs a new tensor
      continue;
    }
    const sim::Tensor& xt = tensor(x);
    const Shape shape = xt.shape;
    const std::string dtype = xt.dtype;
    contribute_gradient(x, add_tensor("grad." + xt.name, TensorKind::kGradient, shape, dtype, o),
                        o);
  }
  for (TensorId p : info.params) {
    if (roles_.persistent_grads) {
      // Accumulated into the persistent .grad buffer; the fresh gradient is scratch space.
      add_input(o, param_grad_.at(p));
      op(o).workspace_bytes = saturating_add(op(o).workspace_bytes, tensor(p).bytes);
    } else {
      const sim::Tensor& pt = tensor(p);
      const Shape shape = pt.shape;
      const std::string dtype = pt.dtype;
      param_grad_[p] = add_tensor("grad." + pt.name, TensorKind::kGradient, shape, dtype, o);
    }
  }
  unit.op = o;
  ++report_.backward_ops;
}

void StepBuilder::build_update(Unit& unit) {
  const OpId o = add_op(roles_.optimizer_name + "_step",
                        sim::LayerType::named(roles_.optimizer_name), sim::Phase::kUpdate, unit);
  for (TensorId p : trainable_) {
    add_input(o, p);
    if (auto g = param_grad_.find(p); g != param_grad_.end()) add_input(o, g->second);
  }
  for (TensorId s : optimizer_state_) add_input(o, s);
  unit.op = o;
  ++report_.update_ops;
}

}  // namespace memplan::importers::detail
