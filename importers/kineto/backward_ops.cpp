// The backward ops and the optimizer step: each forward op's first backward node becomes its
// backward op, which reads the output's gradient and what the forward op saved and writes the
// gradients of its data inputs and parameters; at a fork (a tensor read by several ops) the later
// contribution reads the earlier gradient and replaces it (the sum), and an add passes its
// gradient through to both inputs. The update reads every trainable parameter, its gradient and
// its optimizer state.
#include <optional>
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
  for (TensorId s : info.saved) add_input(o, s);
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
