#pragma once
// What the importer reads off a profiler's CPU events, shared by its stages (kineto_importer.cpp
// runs them): how events nest on their thread, which names are steps, layer ops and backward
// nodes, and an op's recorded arguments (shapes, memplan dtypes, bytes). Nothing here builds a
// workload; it only names what the trace says.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/aten_layers.hpp"
#include "core/units.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

using Shape = std::vector<std::int64_t>;

inline constexpr std::string_view kAtenPrefix = "aten::";
inline constexpr std::string_view kEvaluatePrefix = "autograd::engine::evaluate_function: ";
inline constexpr std::size_t kNoEvent = SIZE_MAX;

bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

/// N of "ProfilerStep#N", or nullopt for any other name.
std::optional<std::int64_t> step_number(std::string_view name);
/// A backward node's name without the engine prefix ("ConvolutionBackward0", "AccumulateGrad",
/// "torch::autograd::CopySlices": an in-place op on a view),
/// or empty when the event is not a backward node.
std::string backward_node(std::string_view name);
/// An event the importer takes as one unit of the step: an aten op, an optimizer call, a backward
/// node. Annotations around them (nn.Module, record_function) are looked through.
bool is_layer_event(std::string_view name);
/// FSDP's own work around the layers (Note [FSDP in a trace] in fsdp_steps.cpp): FSDP2's
/// `FSDP::` ranges and `fsdp::` ops (all-gather copy-in and copy-out, the reduce-scatter's
/// copy-in), FSDP1's `FullyShardedDataParallel._*` hooks (not `FullyShardedDataParallel.forward`,
/// which holds the wrapped module's layers). A unit of its own that no layer op is made of.
bool is_fsdp_machinery(std::string_view name);

/// How CPU events nest on their thread: each event's parent (kNoEvent for a top-level one) and
/// children, in the trace's order.
struct Nesting {
  std::vector<std::size_t> parent;
  std::vector<std::vector<std::size_t>> children;
};
Nesting nest(const std::vector<CpuEvent>& events);

/// Recorded shape of argument k, or empty (not recorded, or not a tensor).
const Shape& dims(const CpuEvent& e, std::size_t k);
/// memplan's dtype of argument k ("float32" when not recorded).
std::string dtype_of(const CpuEvent& e, std::size_t k);
/// The arguments as core/aten_layers.hpp's tests read them: a recorded shape is a tensor of that
/// rank; the profiler records no scalar values, and a 0-dim tensor looks like a scalar, so the
/// rest stays unknown.
std::vector<sim::AtenArgument> aten_arguments(const CpuEvent& e);
/// The op's name without "aten::" and without the trailing underscores of an in-place op.
std::string_view aten_short_name(std::string_view name);

/// An op whose output shape its recorded arguments give: the views (view, reshape, flatten,
/// transpose, permute, unsqueeze, squeeze, select, slice, narrow, chunk, split, expand, t) and
/// pad, a copy: "aten::" names.
bool is_view_op(std::string_view name);
/// The shape of a view op's output (of its first output for chunk and split) from its input's
/// recorded shape and its "Concrete Inputs"; nothing when they are not recorded (PyTorch before
/// 2.x) or do not fit.
std::optional<Shape> view_shape(const CpuEvent& e);

/// Bytes of a tensor of `shape` with `item`-byte elements; InputError at `where` past 2^50.
sim::Bytes checked_bytes(const Shape& shape, sim::Bytes item, const std::string& where);
/// Elements of a tensor of `shape`.
std::size_t numel(const Shape& s);

}  // namespace memplan::importers::detail
