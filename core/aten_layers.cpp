#include "core/aten_layers.hpp"

#include <array>

namespace memplan::sim {

namespace {

using enum Layer;
using T = AtenTest;
constexpr bool kBwd = true;

// clang-format off
constexpr std::array kAtenLayers{
  // The profiler records the ops as called (conv2d, linear, batch_norm, dropout, softmax, the
  // composites that dispatch to the ops below); the capture sees the dispatcher's ops below
  // autograd (convolution, addmm, native_batch_norm, native_dropout, _softmax) and the backward
  // ops. A composite never reaches the capture, so its row is the importer's alone.
  AtenLayer{"aten::conv1d", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::conv2d", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::conv3d", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::convolution", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::_convolution", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::cudnn_convolution", kGeneric, T::kWeightRank, 1, false},
  AtenLayer{"aten::convolution_backward", kGeneric, T::kWeightRank, 2, kBwd},
  AtenLayer{"aten::linear", kLinear, T::kName, -1, false},
  AtenLayer{"aten::addmm", kLinear, T::kName, -1, false},
  AtenLayer{"aten::batch_norm", kBatchNorm, T::kName, -1, false},
  AtenLayer{"aten::native_batch_norm", kBatchNorm, T::kName, -1, false},
  AtenLayer{"aten::cudnn_batch_norm", kBatchNorm, T::kName, -1, false},
  AtenLayer{"aten::native_batch_norm_backward", kBatchNorm, T::kName, -1, kBwd},
  AtenLayer{"aten::cudnn_batch_norm_backward", kBatchNorm, T::kName, -1, kBwd},
  AtenLayer{"aten::layer_norm", kLayerNorm, T::kName, -1, false},
  AtenLayer{"aten::native_layer_norm", kLayerNorm, T::kName, -1, false},
  AtenLayer{"aten::native_layer_norm_backward", kLayerNorm, T::kName, -1, kBwd},
  AtenLayer{"aten::relu", kRelu, T::kName, -1, false},
  AtenLayer{"aten::relu_", kRelu, T::kName, -1, false},
  AtenLayer{"aten::threshold_backward", kRelu, T::kName, -1, kBwd},
  AtenLayer{"aten::relu6", kRelu6, T::kName, -1, false},
  AtenLayer{"aten::relu6_", kRelu6, T::kName, -1, false},
  AtenLayer{"aten::hardtanh", kRelu6, T::kReluSixBounds, 1, false},
  AtenLayer{"aten::hardtanh_", kRelu6, T::kReluSixBounds, 1, false},
  AtenLayer{"aten::hardtanh_backward", kRelu6, T::kReluSixBounds, 2, kBwd},
  AtenLayer{"aten::gelu", kGelu, T::kName, -1, false},
  AtenLayer{"aten::gelu_backward", kGelu, T::kName, -1, kBwd},
  AtenLayer{"aten::max_pool2d", kMaxPool2d, T::kName, -1, false},
  AtenLayer{"aten::max_pool2d_with_indices", kMaxPool2d, T::kName, -1, false},
  AtenLayer{"aten::max_pool2d_with_indices_backward", kMaxPool2d, T::kName, -1, kBwd},
  AtenLayer{"aten::max_pool3d", kMaxPool3d, T::kName, -1, false},
  AtenLayer{"aten::max_pool3d_with_indices", kMaxPool3d, T::kName, -1, false},
  AtenLayer{"aten::max_pool3d_with_indices_backward", kMaxPool3d, T::kName, -1, kBwd},
  AtenLayer{"aten::avg_pool2d", kAvgPool2d, T::kName, -1, false},
  AtenLayer{"aten::avg_pool2d_backward", kAvgPool2d, T::kName, -1, kBwd},
  AtenLayer{"aten::adaptive_avg_pool2d", kAdaptiveAvgPool, T::kName, -1, false},
  AtenLayer{"aten::_adaptive_avg_pool2d", kAdaptiveAvgPool, T::kName, -1, false},
  AtenLayer{"aten::_adaptive_avg_pool2d_backward", kAdaptiveAvgPool, T::kName, -1, kBwd},
  AtenLayer{"aten::dropout", kDropout, T::kName, -1, false},
  AtenLayer{"aten::native_dropout", kDropout, T::kName, -1, false},
  AtenLayer{"aten::native_dropout_backward", kDropout, T::kName, -1, kBwd},
  AtenLayer{"aten::cat", kConcat, T::kName, -1, false},
  AtenLayer{"aten::concat", kConcat, T::kName, -1, false},
  AtenLayer{"aten::add", kAdd, T::kTensorOperands, 0, false},
  AtenLayer{"aten::add_", kAdd, T::kTensorOperands, 0, false},
  AtenLayer{"aten::softmax", kSoftmax, T::kName, -1, false},
  AtenLayer{"aten::_softmax", kSoftmax, T::kName, -1, false},
  AtenLayer{"aten::_softmax_backward_data", kSoftmax, T::kName, -1, kBwd},
  AtenLayer{"aten::cross_entropy_loss", kSoftmaxCrossEntropy, T::kName, -1, false},
  AtenLayer{"aten::embedding", kEmbedding, T::kName, -1, false},
  AtenLayer{"aten::embedding_dense_backward", kEmbedding, T::kName, -1, kBwd},
};
// clang-format on

constexpr bool rows_well_formed() {
  for (std::size_t i = 0; i < kAtenLayers.size(); ++i) {
    const AtenLayer& r = kAtenLayers[i];
    // A row's layer is the test's to decide exactly on kWeightRank rows.
    if ((r.layer == kGeneric) != (r.test == T::kWeightRank)) return false;
    if ((r.argument < 0) != (r.test == T::kName)) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (kAtenLayers[j].aten == r.aten) return false;
    }
  }
  return true;
}
static_assert(rows_well_formed(),
              "each aten name once; kGeneric exactly on kWeightRank rows; tests read an argument");

const AtenArgument* argument_at(std::span<const AtenArgument> arguments, int k) {
  if (k < 0 || static_cast<std::size_t>(k) >= arguments.size()) return nullptr;
  return &arguments[static_cast<std::size_t>(k)];
}

bool number_is(const AtenArgument* a, double value) {
  return a != nullptr && a->number && *a->number == value;
}

}  // namespace

std::span<const AtenLayer> aten_layers() {
  return kAtenLayers;
}

const AtenLayer* find_aten_layer(std::string_view aten) {
  for (const AtenLayer& r : kAtenLayers) {
    if (r.aten == aten) return &r;
  }
  return nullptr;
}

Layer convolution_layer(std::size_t rank) {
  if (rank == 4) return kConv2d;
  if (rank == 5) return kConv3d;
  return kGeneric;
}

Layer aten_layer(const AtenLayer& row, std::span<const AtenArgument> arguments) {
  switch (row.test) {
    case T::kName:
      return row.layer;
    case T::kWeightRank: {
      const AtenArgument* w = argument_at(arguments, row.argument);
      return w != nullptr && w->rank ? convolution_layer(*w->rank) : kGeneric;
    }
    case T::kReluSixBounds:
      return number_is(argument_at(arguments, row.argument), 0.0) &&
                     number_is(argument_at(arguments, row.argument + 1), 6.0)
                 ? row.layer
                 : kGeneric;
    case T::kTensorOperands:
      for (int k = row.argument; k < row.argument + 2; ++k) {
        const AtenArgument* a = argument_at(arguments, k);
        // Only a known non-tensor says no (a profiler trace records no type for a 0-dim tensor).
        if (a != nullptr && a->tensor.has_value() && !*a->tensor) return kGeneric;
      }
      return row.layer;
  }
  return kGeneric;
}

Layer aten_layer(std::string_view aten, std::span<const AtenArgument> arguments) {
  const AtenLayer* row = find_aten_layer(aten);
  return row == nullptr ? kGeneric : aten_layer(*row, arguments);
}

}  // namespace memplan::sim
