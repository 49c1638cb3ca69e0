// ResNet (He et al. 2016) as torchvision builds it (v1.5: the stride sits on the 3x3 conv of a
// bottleneck), and the deep residual family used by Layrub (ResNet-1517) and SuperNeurons
// (ResNet-2500).
#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/models.hpp"

namespace memplan::zoo {
namespace {

Value conv_bn(Network& net, const std::string& name, const std::string& bn, const Value& x,
              std::int64_t out, std::int64_t k, std::int64_t stride, std::int64_t groups = 1) {
  const Value c = net.conv(name, x, {out, {k, k}, {stride, stride}, {k / 2, k / 2}, groups, false});
  return net.batch_norm(bn, c);
}

Value basic_block(Network& net, const std::string& p, const Value& x, std::int64_t planes,
                  std::int64_t stride) {
  Value out = conv_bn(net, p + ".conv1", p + ".bn1", x, planes, 3, stride);
  out = net.relu(p + ".relu1", out, true);
  out = conv_bn(net, p + ".conv2", p + ".bn2", out, planes, 3, 1);
  Value identity = x;
  if (stride != 1 || x.shape[1] != planes) {
    identity = conv_bn(net, p + ".downsample.0", p + ".downsample.1", x, planes, 1, stride);
  }
  out = net.add(p + ".add", out, identity, true);  // out += identity
  return net.relu(p + ".relu2", out, true);
}

Value bottleneck(Network& net, const std::string& p, const Value& x, std::int64_t planes,
                 std::int64_t stride) {
  constexpr std::int64_t kExpansion = 4;
  Value out = conv_bn(net, p + ".conv1", p + ".bn1", x, planes, 1, 1);
  out = net.relu(p + ".relu1", out, true);
  out = conv_bn(net, p + ".conv2", p + ".bn2", out, planes, 3, stride);
  out = net.relu(p + ".relu2", out, true);
  out = conv_bn(net, p + ".conv3", p + ".bn3", out, planes * kExpansion, 1, 1);
  Value identity = x;
  if (stride != 1 || x.shape[1] != planes * kExpansion) {
    identity =
        conv_bn(net, p + ".downsample.0", p + ".downsample.1", x, planes * kExpansion, 1, stride);
  }
  out = net.add(p + ".add", out, identity, true);
  return net.relu(p + ".relu3", out, true);
}

}  // namespace

// Note [Deep residual depth]
// Depth counts weighted layers as He et al. do: the stem conv, the convs of the residual blocks
// and the classifier (projection shortcuts are not counted). ResNet-18/34/50/101/152 use
// torchvision's stage layouts. ResNet-2500 is SuperNeurons' own network, bottleneck stages of
// 6/32/788/6 blocks (linnanwang/superneurons-release, testing/residual_imagenet_max.cpp): 2,498
// weighted layers, 2,500 once its two pooling layers are counted as SuperNeurons does.
// Any other depth D keeps ResNet-152's shape and grows its third stage (Layrub and SuperNeurons
// scale ResNet the same way, by stacking blocks at 14x14):
//   (D - 2) divisible by 3 → bottleneck blocks [3, 8, n, 3], n = (D - 2)/3 - 14 ≥ 1;
//   otherwise (D - 2) even → basic blocks [3, 4, n, 3],     n = (D - 2)/2 - 10 ≥ 1.
// ResNet-1517 (Layrub) is bottleneck with n = 491. Depths fitting neither rule (or too shallow)
// are rejected.
ResidualLayout residual_layout(std::int64_t depth) {
  switch (depth) {
    case 18:
      return {false, {2, 2, 2, 2}};
    case 34:
      return {false, {3, 4, 6, 3}};
    case 50:
      return {true, {3, 4, 6, 3}};
    case 101:
      return {true, {3, 4, 23, 3}};
    case 152:
      return {true, {3, 8, 36, 3}};
    case 2500:
      return {true, {6, 32, 788, 6}};
    default:
      break;
  }
  constexpr std::int64_t kMaxDepth = 100'000;
  if (depth >= 47 && depth <= kMaxDepth && (depth - 2) % 3 == 0) {
    return {true, {3, 8, (depth - 2) / 3 - 14, 3}};
  }
  if (depth >= 24 && depth <= kMaxDepth && (depth - 2) % 2 == 0) {
    return {false, {3, 4, (depth - 2) / 2 - 10, 3}};
  }
  throw sim::InputError(
      "--depth",
      fmt::format("the residual family cannot have depth {} (18, 34, 50, 101, 152, or D ≤ {} with "
                  "D-2 divisible by 3 and D ≥ 47 (bottleneck) or D-2 even and D ≥ 24 (basic))",
                  depth, kMaxDepth));
}

void build_resnet(Network& net, const ModelOptions& options, std::int64_t depth) {
  const ResidualLayout layout = residual_layout(depth);
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = conv_bn(net, "conv1", "bn1", x, 64, 7, 2);
  h = net.relu("relu", h, true);
  h = net.max_pool("maxpool", h, {{3, 3}, {2, 2}, {1, 1}, false});
  const std::int64_t planes[] = {64, 128, 256, 512};
  for (std::size_t s = 0; s < layout.blocks.size(); ++s) {
    for (std::int64_t b = 0; b < layout.blocks[s]; ++b) {
      const std::string p = fmt::format("layer{}.{}", s + 1, b);
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      h = layout.bottleneck ? bottleneck(net, p, h, planes[s], stride)
                            : basic_block(net, p, h, planes[s], stride);
    }
  }
  h = net.adaptive_avg_pool("avgpool", h, {1, 1});
  const Value logits = net.linear("fc", Network::flatten(h), 1000);
  net.softmax_cross_entropy("loss", logits, labels);
}

}  // namespace memplan::zoo
