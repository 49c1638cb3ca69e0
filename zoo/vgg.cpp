// VGG-16 (Simonyan & Zisserman 2015, configuration D) as torchvision builds it: 3x3 convs with
// bias, ReLU(inplace=True), 2x2 max-pools, adaptive average pooling to 7x7, two 4096 fc layers
// each followed by ReLU and dropout.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {

void build_vgg16(Network& net, const ModelOptions& options) {
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  constexpr std::int64_t kPool = -1;
  constexpr std::int64_t kConfigD[] = {64,    64,  kPool, 128, 128,   kPool, 256, 256, 256,
                                       kPool, 512, 512,   512, kPool, 512,   512, 512, kPool};
  Value h = x;
  int index = 0;
  for (std::int64_t c : kConfigD) {
    if (c == kPool) {
      h = net.max_pool(fmt::format("features.{}", index++), h, {{2, 2}, {2, 2}, {}, false});
      continue;
    }
    h = net.conv(fmt::format("features.{}", index++), h, {c, {3, 3}, {1, 1}, {1, 1}, 1, true});
    h = net.relu(fmt::format("features.{}", index++), h, true);
  }
  h = net.adaptive_avg_pool("avgpool", h, {7, 7});
  h = net.linear("classifier.0", Network::flatten(h), 4096);
  h = net.relu("classifier.1", h, true);
  h = net.dropout("classifier.2", h);
  h = net.linear("classifier.3", h, 4096);
  h = net.relu("classifier.4", h, true);
  h = net.dropout("classifier.5", h);
  h = net.linear("classifier.6", h, 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
