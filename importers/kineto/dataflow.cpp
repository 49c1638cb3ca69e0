#include <algorithm>
#include <utility>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "importers/kineto/saturating_add.hpp"
#include "importers/kineto/step_builder.hpp"

// Note [Kineto dataflow]
// ~~~~~~~~~~~~~~~~~~~~~~
// The profiler records, for each operator, its name, its input shapes and dtypes, and for ops that
// autograd differentiates a sequence number; it does not record which tensor an op read. The
// importer rebuilds the layer-level dataflow as follows.
//
//  - Layer ops are the top-level operators of the step on the thread that calls prof.step() (the
//    forward ops, the optimizer step), and the top-level events of the other threads inside the
//    step window (the autograd engine's backward nodes). Annotations (nn.Module, user ranges) are
//    looked through; the data loader's `enumerate(DataLoader)` is skipped (step_units.cpp).
//  - A forward op's layer is core/aten_layers.hpp's (unit_roles.cpp); forward_ops.cpp has one
//    rule per layer for what it reads, writes and saves, and a generic rule for the rest.
//  - Forward ops run in program order. An op's first data input is the previous layer op's output
//    when the shapes agree (a chain). When they do not, it is the latest tensor of that shape made
//    since the last merge that nothing has read yet (the chain goes on after side work of other
//    shapes: the noise of stochastic depth, `x + f(x) * noise`); else the op starts a branch, and
//    its input is the oldest live tensor of that shape produced since the last merge (a residual
//    add): that is the block input a downsample branch reads. The second input of an add (the
//    skip) is the most recent live tensor of that shape that no add has read yet. A tensor
//    written over in place is no longer a candidate. Inputs that match nothing are
//    the network's inputs. A generic op's operands after the first are the most recent live tensor
//    of their shape (resolve_recent); a concatenation reads each tensor of its recorded list once,
//    in order; a loss's target is the latest tensor of its shape nothing has read (resolve_target).
//  - Output shapes that the profiler does not record (convolution, pooling) are taken from the
//    next forward op that reads a tensor of the expected batch and channel extents.
//  - A backward node belongs to the forward op whose subtree recorded its sequence number (the
//    last such op: an op that creates no autograd node records the number the next node gets);
//    a view recorded after it that took the number made the node itself (Swin's `view` of its
//    scores after the masked_fill that built the mask: a ViewBackward0, no masked_fill's).
//    Each forward op's first backward node is its backward op; later ones (TBackward of a linear)
//    and AccumulateGrad are folded into it. Saved tensors follow PyTorch's autograd formulas.
//  - Top-level events that are not layer ops (BatchNorm's num_batches_tracked += 1, zero_grad,
//    ones_like, AccumulateGrad, the gradient sums at forks) are folded: their compute-stream time
//    is added to the previous layer op (their other streams' work is an op of its own, Note
//    [Device time] in step_units.hpp), so that the step's total device time is preserved.
//  - Collectives are ops of their own, without tensors, in issue order (Note [Collectives of a
//    step] in collective_units.cpp).
// It can be wrong when two live tensors of one shape could both be the input of a branch (the
// rule picks the oldest since the last merge), for ops with several tensor outputs other than the
// known ones, for tensors that are reused far apart (weight sharing, RNN loops), for
// concatenations (DenseNet), whose inputs are resolved one by one by the same rules, and for
// views recorded without "Concrete Inputs" (before PyTorch 2), whose shapes are guessed.

namespace memplan::importers::detail {

using sim::kNoOp;
using sim::OpId;
using sim::TensorId;

StepBuilder::StepBuilder(const KinetoTrace& trace, const Nesting& nesting, std::vector<Unit>& units,
                         const StepRoles& roles, const StepStreams& streams, bool time_only,
                         ImportReport& report)
    : trace_(trace),
      nesting_(nesting),
      units_(units),
      roles_(roles),
      streams_(streams),
      time_only_(time_only),
      report_(report) {
  workload_.streams = streams.labels;
}

void StepBuilder::fail(const std::string& what) const {
  throw sim::InputError(trace_.source, what);
}

void StepBuilder::build() {
  bool updated = false;
  bool settled = false;
  for (std::size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    if (!settled && (u.role == Unit::Role::kBackward || u.role == Unit::Role::kUpdate)) {
      settle_parameters();  // the forward is built: its inputs are known, no gradient made yet
      settle_nodes();
      settled = true;
    }
    switch (u.role) {
      case Unit::Role::kForward:
        build_forward(u, i);
        break;
      case Unit::Role::kBackward:
        build_backward(u);
        break;
      case Unit::Role::kUpdate:
        if (updated) {
          fold(u);
        } else {
          build_update(u);
          updated = true;
        }
        break;
      case Unit::Role::kGlue:
        fold(u);
        break;
      case Unit::Role::kCollective:
        build_collective(u);
        break;
    }
    if (u.role != Unit::Role::kCollective) add_side_ops(u);
  }
  if (!settled) settle_parameters();  // a step without backward or update
  if (report_.forward_ops == 0) {
    fail(
        fmt::format("{} has no forward layer op (no aten:: operator with recorded "
                    "input shapes): record with torch.profiler.profile(record_shapes=True)",
                    report_.step.label));
  }
  if (pending_ns_ > 0) {  // to the first op on the compute stream (a forward op exists)
    auto first = std::find_if(workload_.ops.begin(), workload_.ops.end(),
                              [](const sim::Op& o) { return o.stream == 0 && !o.collective; });
    first->duration_ns = saturating_add(first->duration_ns, pending_ns_);
  }
}

void StepBuilder::fold(const Unit& unit) {
  ++report_.folded_events;
  if (last_op_ == kNoOp) {
    pending_ns_ = saturating_add(pending_ns_, unit.device_ns);
  } else {
    op(last_op_).duration_ns = saturating_add(op(last_op_).duration_ns, unit.device_ns);
  }
}

std::size_t StepBuilder::new_value(TensorId t, const Shape& shape, const std::string& dtype,
                                   bool activation) {
  Value v;
  v.tensor = t;
  v.shape = shape;
  v.dtype = dtype;
  v.activation = activation;
  values_.push_back(std::move(v));
  return values_.size() - 1;
}

TensorId StepBuilder::add_tensor(std::string name, sim::TensorKind kind, const Shape& shape,
                                 const std::string& dtype, OpId producer, TensorId in_place_of) {
  sim::Tensor t;
  t.id = sim::tensor_id(workload_.tensors.size());
  t.kind = kind;
  t.shape = shape;
  t.dtype = dtype;
  t.bytes = checked_bytes(shape, sim::dtype_bytes(dtype).value_or(4),
                          fmt::format("{}: tensor '{}'", trace_.source, name));
  t.name = std::move(name);
  t.producer = producer;
  t.in_place_of = in_place_of;
  if (producer != kNoOp) op(producer).outputs.push_back(t.id);
  workload_.tensors.push_back(std::move(t));
  return workload_.tensors.back().id;
}

OpId StepBuilder::add_op(std::string name, sim::LayerType layer, sim::Phase phase,
                         const Unit& unit) {
  sim::Op o;
  o.id = sim::op_id(workload_.ops.size());
  o.name = std::move(name);
  o.layer = std::move(layer);
  o.phase = phase;
  o.duration_ns = saturating_add(unit.device_ns, pending_ns_);
  o.workspace_bytes = unit.workspace;
  pending_ns_ = 0;
  workload_.ops.push_back(std::move(o));
  // Its launch: the first of its compute-stream work, else of any, else its CPU start.
  const auto on_compute = unit.first_launch_on.find(0);
  launch_.push_back(on_compute != unit.first_launch_on.end()
                        ? on_compute->second
                        : unit.first_launch.value_or(event(unit).start_ns));
  last_op_ = workload_.ops.back().id;
  return last_op_;
}

void StepBuilder::add_input(OpId o, TensorId t) {
  auto& in = op(o).inputs;
  if (std::find(in.begin(), in.end(), t) == in.end()) in.push_back(t);
}

std::size_t StepBuilder::resolve(const Shape& shape, const std::string& dtype, bool first,
                                 std::size_t exclude, bool for_merge,
                                 const std::vector<std::size_t>& taken) {
  auto usable = [&](std::size_t v) {
    return v != exclude && !values_[v].overwritten && values_[v].shape == shape &&
           std::find(taken.begin(), taken.end(), v) == taken.end();
  };
  if (first && last_output_ && usable(*last_output_)) return *last_output_;
  if (first) {
    // A tensor made since the last merge that nothing has read yet is waiting for this op: the
    // chain went on after side work of other shapes (stochastic depth's noise).
    for (std::size_t v = values_.size(); v-- > merge_boundary_;) {
      if (usable(v) && values_[v].activation && !values_[v].read) return v;
    }
  }
  if (for_merge) {
    // A branch output that nothing has read yet is waiting for this merge.
    for (std::size_t v = values_.size(); v-- > 0;) {
      if (usable(v) && values_[v].activation && !values_[v].merged && !values_[v].read) return v;
    }
  }
  for (bool allow_superseded : {false, true}) {
    for (std::size_t v = merge_boundary_; v < values_.size(); ++v) {
      if (usable(v) && values_[v].activation && (allow_superseded || !values_[v].superseded))
        return v;
    }
  }
  for (std::size_t v = values_.size(); v-- > 0;) {
    if (usable(v)) return v;
  }
  return new_input(shape, dtype);
}

std::size_t StepBuilder::new_input(const Shape& shape, const std::string& dtype) {
  const TensorId t = add_tensor(fmt::format("input{}", input_count_++), sim::TensorKind::kInput,
                                shape, dtype, kNoOp);
  return new_value(t, shape, dtype, false);
}

std::size_t StepBuilder::resolve_recent(const Shape& shape, const std::string& dtype) {
  for (std::size_t v = values_.size(); v-- > 0;) {
    if (values_[v].activation && !values_[v].overwritten && values_[v].shape == shape) return v;
  }
  return resolve(shape, dtype, false);
}

namespace {
bool same_shape_prefix(const Shape& s, std::int64_t n, std::int64_t c, std::size_t rank) {
  return s.size() == rank && rank >= 2 && s[0] == n && s[1] == c;
}
}  // namespace

Shape StepBuilder::lookahead(std::size_t position, std::int64_t n, std::int64_t c, std::size_t rank,
                             const Shape& fallback) const {
  for (std::size_t j = position + 1; j < units_.size(); ++j) {
    if (units_[j].role != Unit::Role::kForward) continue;
    const CpuEvent& e = event(units_[j]);
    const bool add = units_[j].layer == sim::Layer::kAdd;  // reads two tensors of its shape
    for (std::size_t k = 0; k < (add ? 2U : 1U); ++k) {
      if (same_shape_prefix(dims(e, k), n, c, rank)) return dims(e, k);
    }
  }
  return fallback;
}

Shape StepBuilder::lookahead_view(std::size_t position, const Shape& from) const {
  for (std::size_t j = position + 1; j < units_.size(); ++j) {
    if (units_[j].role != Unit::Role::kForward) continue;
    const Shape& s = dims(event(units_[j]), 0);
    if (!s.empty() && s != from && numel(s) == numel(from)) return s;
  }
  Shape flat{from[0], 1};
  for (std::size_t d = 1; d < from.size(); ++d) flat[1] *= from[d];
  return flat;
}

}  // namespace memplan::importers::detail
