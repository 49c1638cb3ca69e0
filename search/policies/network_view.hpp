#pragma once
// NetworkView: the layer-level reading of a Workload that the published policies are written in —
// "the layers" are the forward ops in issue order; each has its backward op(s), the feature maps
// it reads as inputs and the ones it writes. vDNN, SuperNeurons and Chen's checkpointing speak of
// layers; memplan's plans speak of feature maps; this view translates between the two.
#include <string_view>
#include <vector>

#include "core/feature_maps.hpp"
#include "core/workload.hpp"

namespace memplan::search {

/// Convolution layers (conv2d, conv3d): the convolution family of core/layer.hpp.
bool is_conv_layer(const sim::LayerType& layer);

/// What today's checkpointing policies tell ops apart by (PyTorch's own lists: torchtitan's
/// selective-AC save list, the partitioner's compute-intensive ops and recomputable allowlist).
/// Known layers by their family; a generic op by its ATen name ("aten::addmm", "bmm",
/// "_scaled_dot_product_flash_attention").
enum class OpKind {
  kLinearMatmul,    // a linear layer's product: aten.mm, addmm, linear, matmul
  kBatchedMatmul,   // attention's products as separate kernels: bmm, baddbmm
  kFusedAttention,  // scaled-dot-product attention in one kernel (flash, efficient, cuDNN, math)
  kConvolution,     // convolution, conv2d, conv3d
  kPointwise,       // the partitioner's recomputable allowlist: activations, add, mul, ...
  kRandom,          // a random op: dropout
  kLayoutCopy,      // a copy or view that only lays data out anew: clone, contiguous, view, ...
  kOther,           // normalisation, softmax, pooling, embedding, loss, anything else
};
OpKind op_kind(const sim::Op& op);
/// The partitioner's compute-intensive ops (matmuls, attention, convolution).
bool compute_intensive(OpKind kind);

class NetworkView {
 public:
  /// Requires a validated workload.
  explicit NetworkView(const sim::Workload& workload);

  [[nodiscard]] const sim::Workload& workload() const { return *workload_; }
  [[nodiscard]] const std::vector<sim::FeatureMap>& feature_maps() const { return maps_; }
  /// Forward ops in issue order.
  [[nodiscard]] const std::vector<sim::OpId>& layers() const { return layers_; }
  /// Position of a forward op in layers(), or -1.
  [[nodiscard]] int layer_index(sim::OpId op) const { return layer_index_[index(op)]; }
  /// Backward ops that differentiate a forward op (named by `differentiates`), in issue order.
  [[nodiscard]] const std::vector<sim::OpId>& backward_ops_of(sim::OpId forward_op) const {
    return backward_of_[index(forward_op)];
  }
  /// Index into feature_maps() of a tensor, or -1 when it is not a feature map.
  [[nodiscard]] int map_index(sim::TensorId tensor) const { return map_index_[index(tensor)]; }
  /// Feature maps (indices into feature_maps()) that a forward op reads.
  [[nodiscard]] const std::vector<int>& maps_read_by(sim::OpId op) const {
    return maps_read_by_[index(op)];
  }
  /// Bytes of a feature map.
  [[nodiscard]] sim::Bytes map_bytes(int map) const;
  /// The forward op that writes a feature map.
  [[nodiscard]] sim::OpId producer(int map) const;

 private:
  const sim::Workload* workload_;
  std::vector<sim::FeatureMap> maps_;
  std::vector<sim::OpId> layers_;
  std::vector<int> layer_index_;
  std::vector<std::vector<sim::OpId>> backward_of_;
  std::vector<int> map_index_;
  std::vector<std::vector<int>> maps_read_by_;
};

}  // namespace memplan::search
