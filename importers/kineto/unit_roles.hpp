#pragma once
// What each unit of a step is (step_units.hpp): a forward op and its layer, an alias (a view or a
// copy of the tensor it reads), a backward node, the optimizer step, or glue to fold into the op
// before it — and what the units say about the step as a whole: the optimizer and the state it
// keeps per parameter, how zero_grad clears gradients, and the leaves autograd accumulated into.
//
// A forward op's layer comes from core/aten_layers.hpp's table (the one the PyTorch capture asks
// too), read with the shapes the profiler recorded; an op the table does not know is a generic op
// named by its aten name. An op whose recorded shapes do not fit its layer's rule in
// forward_ops.cpp (a convolution without a weight of the input's rank, an add of two shapes) is
// glue.
#include <cstddef>
#include <string>
#include <vector>

#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"
#include "importers/kineto/step_units.hpp"

namespace memplan::importers::detail {

/// A leaf tensor's gradient as an AccumulateGrad node records it (Note [Leaves from
/// AccumulateGrad] in parameters.cpp).
struct Leaf {
  Shape shape;
  std::string dtype;
};

struct StepRoles {
  /// The optimizer's class, lower-cased ("sgd", "adamw"), and the state it keeps per parameter.
  std::string optimizer_name = "optimizer";
  std::vector<std::string> state_names;
  /// The parameters as the optimizer's foreach/fused ops record them (empty when they do not).
  std::vector<Shape> optimizer_list;
  bool persistent_grads = false;  // zero_grad zeroes .grad instead of freeing it
  std::size_t leaf_nodes = 0;     // AccumulateGrad nodes in the step
  std::vector<Leaf> leaves;       // those with a recorded shape, in backward order
};

/// Sets each unit's role, a forward unit's layer (or alias), a backward node's sequence number,
/// and a forward op's sequence numbers. `time_only`: the step has no recorded shapes, so every
/// aten op before the backward pass is a forward op with its time and no tensors.
StepRoles classify_units(const KinetoTrace& trace, const Nesting& nesting, bool time_only,
                         std::vector<Unit>& units);

}  // namespace memplan::importers::detail
