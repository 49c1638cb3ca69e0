#include "search/policies/network_view.hpp"

#include <algorithm>
#include <array>

namespace memplan::search {

bool is_conv_layer(const sim::LayerType& layer) {
  return layer.rule().family == sim::LayerFamily::kConvolution;
}

namespace {

// An ATen name without its namespace, overload and in-place mark: "aten::add_.Tensor" -> "add".
std::string_view aten_base(std::string_view name) {
  if (const std::size_t colons = name.rfind("::"); colons != std::string_view::npos) {
    name.remove_prefix(colons + 2);
  }
  if (const std::size_t dot = name.find('.'); dot != std::string_view::npos) {
    name = name.substr(0, dot);
  }
  while (name.size() > 1 && name.back() == '_') name.remove_suffix(1);
  return name;
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

OpKind generic_kind(std::string_view name) {
  static constexpr std::array<std::string_view, 4> kLinear{"mm", "addmm", "linear", "matmul"};
  static constexpr std::array<std::string_view, 2> kBatched{"bmm", "baddbmm"};
  static constexpr std::array<std::string_view, 19> kPointwise{
      "add", "sub", "mul", "div",  "neg",   "relu", "gelu",  "silu",  "sigmoid", "tanh",
      "exp", "log", "pow", "sqrt", "rsqrt", "erf",  "clamp", "where", "abs"};
  static constexpr std::array<std::string_view, 16> kLayout{
      "clone",     "contiguous", "view",    "reshape",   "_unsafe_view", "expand",
      "transpose", "permute",    "t",       "split",     "chunk",        "slice",
      "select",    "unsqueeze",  "squeeze", "as_strided"};
  const std::string_view base = aten_base(name);
  const auto in = [&](const auto& list) {
    return std::find(list.begin(), list.end(), base) != list.end();
  };
  if (in(kLinear)) return OpKind::kLinearMatmul;
  if (in(kBatched)) return OpKind::kBatchedMatmul;
  if (contains(base, "scaled_dot_product") || contains(base, "flash_attention") ||
      contains(base, "efficient_attention") || contains(base, "cudnn_attention")) {
    return OpKind::kFusedAttention;
  }
  if (contains(base, "conv")) return OpKind::kConvolution;
  if (in(kPointwise)) return OpKind::kPointwise;
  if (contains(base, "dropout") || base == "bernoulli" || base == "rand_like") {
    return OpKind::kRandom;
  }
  if (in(kLayout)) return OpKind::kLayoutCopy;
  return OpKind::kOther;
}

}  // namespace

OpKind op_kind(const sim::Op& op) {
  switch (op.layer.kind()) {
    case sim::Layer::kGeneric:
      return generic_kind(op.layer.name());
    case sim::Layer::kLinear:
      return OpKind::kLinearMatmul;
    case sim::Layer::kAttentionScores:
    case sim::Layer::kAttentionContext:
      return OpKind::kBatchedMatmul;
    default:
      break;
  }
  switch (op.layer.rule().family) {
    case sim::LayerFamily::kConvolution:
      return OpKind::kConvolution;
    case sim::LayerFamily::kMatmul:
      return OpKind::kLinearMatmul;
    case sim::LayerFamily::kActivation:
    case sim::LayerFamily::kSum:
      return OpKind::kPointwise;
    case sim::LayerFamily::kDropout:
      return OpKind::kRandom;
    default:
      return OpKind::kOther;
  }
}

bool compute_intensive(OpKind kind) {
  return kind == OpKind::kLinearMatmul || kind == OpKind::kBatchedMatmul ||
         kind == OpKind::kFusedAttention || kind == OpKind::kConvolution;
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
