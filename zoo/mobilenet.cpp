// MobileNetV2 (Sandler et al. 2018) as torchvision builds it: inverted residual blocks (1x1
// expand, 3x3 depthwise, 1x1 linear projection), ReLU6(inplace=True) (which saves a clone of its
// input: Network::relu6), a residual `x + conv(x)`
// (a new tensor, not in place) where stride is 1 and the width is unchanged, dropout 0.2.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {
namespace {

Value conv_bn_act(Network& net, const std::string& p, const Value& x, std::int64_t out,
                  std::int64_t k, std::int64_t stride, std::int64_t groups, bool activation) {
  Value h = net.conv(p + ".0", x, {out, {k, k}, {stride, stride}, {k / 2, k / 2}, groups, false});
  h = net.batch_norm(p + ".1", h);
  return activation ? net.relu6(p + ".2", h) : h;
}

}  // namespace

void build_mobilenet_v2(Network& net, const ModelOptions& options) {
  struct Setting {
    std::int64_t t, c, n, s;
  };
  constexpr Setting kSettings[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                   {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = conv_bn_act(net, "features.0", x, 32, 3, 2, 1, true);
  int index = 1;
  for (const Setting& s : kSettings) {
    for (std::int64_t i = 0; i < s.n; ++i) {
      const std::string p = fmt::format("features.{}", index++);
      const std::int64_t stride = i == 0 ? s.s : 1;
      const std::int64_t in = h.shape[1];
      const std::int64_t hidden = in * s.t;
      Value y = h;
      int layer = 0;
      if (s.t != 1)
        y = conv_bn_act(net, fmt::format("{}.conv.{}", p, layer++), y, hidden, 1, 1, 1, true);
      y = conv_bn_act(net, fmt::format("{}.conv.{}", p, layer++), y, hidden, 3, stride, hidden,
                      true);
      y = conv_bn_act(net, fmt::format("{}.conv.{}", p, layer++), y, s.c, 1, 1, 1, false);
      if (stride == 1 && in == s.c) y = net.add(p + ".add", h, y, false);
      h = y;
    }
  }
  h = conv_bn_act(net, fmt::format("features.{}", index), h, 1280, 1, 1, 1, true);
  h = net.adaptive_avg_pool("avgpool", h, {1, 1});
  h = net.dropout("classifier.0", Network::flatten(h));
  h = net.linear("classifier.1", h, 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
