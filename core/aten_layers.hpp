#pragma once
// The aten operators that are layers of memplan's vocabulary (core/layer.hpp), by name: one table
// that both readers of PyTorch steps ask, so that an op is the same layer whichever way the step
// was recorded —
//  - the Kineto importer (importers/kineto/): the profiler's top-level events, the ops as the model
//    called them (aten::conv2d, aten::linear, aten::cross_entropy_loss);
//  - the PyTorch capture (python/memplan/torch/recorder.py, through memplan._core's aten_layer):
//    the dispatcher's ops below autograd (aten::convolution, aten::addmm) and their backward ops
//    (aten::convolution_backward, aten::threshold_backward).
// An op with no row, or whose row's test says no, is a generic op that keeps its recorded name
// (each reader keeps its own spelling: the capture "aten::mm", the importer "mm").
//
// Some layers follow from the arguments as well as the name: a convolution's layer from its
// weight's rank, hardtanh is relu6 only between 0 and 6, add is a layer only between two tensors.
// Each reader describes the arguments it has (AtenArgument); what its recording does not say stays
// unknown, and only what is known can say no (the profiler records shapes, not scalar values).
//
// Note [conv1d]: the vocabulary has no 1-d convolution. A conv1d reads x, weight and bias and
// saves x and weight like conv2d, but the convolution rows' windows are 2- or 3-d (spatial_dims),
// the backends' kernels need 4- or 5-d tensors and the zoo prices 2-d windows: a conv1d imported
// as conv2d would be refused by every backend as a malformed conv2d. So a convolution with a 3-d
// weight has no layer: it is a generic op that keeps its name (its time is the recorded one), and
// the importer still builds its tensors by the convolution rule (weight and bias parameters, x
// and weight saved). Giving conv1d a row is Note [Adding a layer] in core/layer.hpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/layer.hpp"

namespace memplan::sim {

/// How a row's layer follows from the op's arguments.
enum class AtenTest : std::uint8_t {
  kName,            // the name alone
  kWeightRank,      // a convolution: conv2d for a 4-d weight, conv3d for a 5-d one, else none
  kReluSixBounds,   // hardtanh: relu6 when its two bounds are 0 and 6
  kTensorOperands,  // add: a layer only when its first two arguments are tensors
};

struct AtenLayer {
  std::string_view aten;  // "aten::convolution"
  Layer layer;            // kGeneric on kWeightRank rows: the weight's rank says
  AtenTest test;
  int argument;   // the argument the test reads (the weight, the first bound); -1 for none
  bool backward;  // the layer's backward op (aten::convolution_backward)
};

/// What a test may read of one argument of a call.
struct AtenArgument {
  std::optional<bool> tensor;       // whether it is a tensor
  std::optional<std::size_t> rank;  // a tensor's number of dimensions
  std::optional<double> number;     // a number's value
};

/// The table, forward rows first per layer.
[[nodiscard]] std::span<const AtenLayer> aten_layers();
/// The row of the operator named `aten` ("aten::addmm"), or nullptr.
[[nodiscard]] const AtenLayer* find_aten_layer(std::string_view aten);
/// The layer of a call of `row`'s operator with `arguments` (in the schema's order): the row's
/// layer, or what its test says; kGeneric when the test says no layer.
[[nodiscard]] Layer aten_layer(const AtenLayer& row, std::span<const AtenArgument> arguments);
/// The same by name; kGeneric for an operator with no row.
[[nodiscard]] Layer aten_layer(std::string_view aten, std::span<const AtenArgument> arguments);
/// The convolution layer of a weight with `rank` dimensions: conv2d (4), conv3d (5), else kGeneric
/// (a conv1d's 3-d weight, Note [conv1d]).
[[nodiscard]] Layer convolution_layer(std::size_t rank);

}  // namespace memplan::sim
