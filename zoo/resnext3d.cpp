// ResNeXt-101 for video (Hara, Kataoka & Satoh, CVPR 2018, "Can spatiotemporal 3D CNNs retrace the
// history of 2D CNNs and ImageNet?"; their 3D-ResNets-PyTorch resnext.py): 3D convolutions over a
// TxHxW clip (default 16x112x112), a 7x7x7 stem with stride (1,2,2), bottleneck blocks of
// cardinality 32 with grouped 3x3x3 convs, widths 128-256-512-1024 expanded 2x, stages of
// 3/4/23/3 blocks, projection shortcuts (type B), 400 Kinetics classes. Even batch 1 is large.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {
namespace {

Value conv3_bn(Network& net, const std::string& p, const std::string& bn, const Value& x,
               std::int64_t out, std::int64_t k, std::int64_t stride, std::int64_t groups = 1) {
  const Value c = net.conv(
      p, x, {out, {k, k, k}, {stride, stride, stride}, {k / 2, k / 2, k / 2}, groups, false});
  return net.batch_norm(bn, c);
}

}  // namespace

void build_resnext3d(Network& net, const ModelOptions& options) {
  constexpr std::int64_t kCardinality = 32;
  constexpr std::int64_t kExpansion = 2;
  constexpr std::int64_t kBlocks[] = {3, 4, 23, 3};
  constexpr std::int64_t kPlanes[] = {128, 256, 512, 1024};
  const Value x = net.input("clip", {3, options.input[0], options.input[1], options.input[2]});
  const Value labels = net.int_input("labels", {});
  Value h = net.conv("conv1", x, {64, {7, 7, 7}, {1, 2, 2}, {3, 3, 3}, 1, false});
  h = net.batch_norm("bn1", h);
  h = net.relu("relu", h, true);
  h = net.max_pool("maxpool", h, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false});
  for (std::size_t s = 0; s < std::size(kBlocks); ++s) {
    for (std::int64_t b = 0; b < kBlocks[s]; ++b) {
      const std::string p = fmt::format("layer{}.{}", s + 1, b);
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const std::int64_t mid = kPlanes[s];  // cardinality x (planes / 32)
      Value out = conv3_bn(net, p + ".conv1", p + ".bn1", h, mid, 1, 1);
      out = net.relu(p + ".relu1", out, true);
      out = conv3_bn(net, p + ".conv2", p + ".bn2", out, mid, 3, stride, kCardinality);
      out = net.relu(p + ".relu2", out, true);
      out = conv3_bn(net, p + ".conv3", p + ".bn3", out, kPlanes[s] * kExpansion, 1, 1);
      Value identity = h;
      if (b == 0) {
        identity = conv3_bn(net, p + ".downsample.0", p + ".downsample.1", h,
                            kPlanes[s] * kExpansion, 1, stride);
      }
      out = net.add(p + ".add", out, identity, true);
      h = net.relu(p + ".relu3", out, true);
    }
  }
  h = net.adaptive_avg_pool("avgpool", h, {1, 1, 1});
  h = net.linear("fc", Network::flatten(h), 400);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
