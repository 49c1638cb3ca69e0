#include "search/policies/network_view.hpp"

namespace memplan::search {

bool is_conv_layer(const sim::LayerType& layer) {
  return layer.rule().family == sim::LayerFamily::kConvolution;
}

NetworkView::NetworkView(const sim::Workload& workload)
    : workload_(&workload), maps_(sim::find_feature_maps(workload)) {
  const auto n_ops = workload.ops.size();
  layer_index_.assign(n_ops, -1);
  backward_of_.resize(n_ops);
  maps_read_by_.resize(n_ops);
  map_index_.assign(workload.tensors.size(), -1);
  for (std::size_t m = 0; m < maps_.size(); ++m) {
    map_index_[index(maps_[m].tensor)] = static_cast<int>(m);
  }
  for (const sim::Op& op : workload.ops) {
    if (op.phase == sim::Phase::kForward) {
      layer_index_[index(op.id)] = static_cast<int>(layers_.size());
      layers_.push_back(op.id);
      for (sim::TensorId t : op.inputs) {
        const int m = map_index_[index(t)];
        if (m >= 0) maps_read_by_[index(op.id)].push_back(m);
      }
    } else if (op.phase == sim::Phase::kBackward && op.differentiates != sim::kNoOp) {
      backward_of_[index(op.differentiates)].push_back(op.id);
    }
  }
}

sim::Bytes NetworkView::map_bytes(int map) const {
  return workload_->tensor(maps_[static_cast<std::size_t>(map)].tensor).bytes;
}

sim::OpId NetworkView::producer(int map) const {
  return workload_->tensor(maps_[static_cast<std::size_t>(map)].tensor).producer;
}

}  // namespace memplan::search
