// DenseNet-121 (Huang et al. 2017) as torchvision builds it (memory_efficient=False): growth 32,
// bottleneck width 4x32, blocks of 6/12/24/16 layers, transitions halving the channels. Every
// dense layer concatenates all earlier features into a new tensor that its batch-norm saves —
// the quadratic memory DenseNet is known for.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {

void build_densenet121(Network& net, const ModelOptions& options) {
  constexpr std::int64_t kGrowth = 32;
  constexpr std::int64_t kBottleneck = 4;
  constexpr std::int64_t kBlocks[] = {6, 12, 24, 16};
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = net.conv("features.conv0", x, {64, {7, 7}, {2, 2}, {3, 3}, 1, false});
  h = net.batch_norm("features.norm0", h);
  h = net.relu("features.relu0", h, true);
  h = net.max_pool("features.pool0", h, {{3, 3}, {2, 2}, {1, 1}, false});
  for (std::size_t b = 0; b < std::size(kBlocks); ++b) {
    std::vector<Value> features{h};
    for (std::int64_t l = 0; l < kBlocks[b]; ++l) {
      const std::string p = fmt::format("features.denseblock{}.denselayer{}", b + 1, l + 1);
      Value y = net.concat(p + ".cat", features);
      y = net.batch_norm(p + ".norm1", y);
      y = net.relu(p + ".relu1", y, true);
      y = net.conv(p + ".conv1", y, {kBottleneck * kGrowth, {1, 1}, {}, {}, 1, false});
      y = net.batch_norm(p + ".norm2", y);
      y = net.relu(p + ".relu2", y, true);
      y = net.conv(p + ".conv2", y, {kGrowth, {3, 3}, {1, 1}, {1, 1}, 1, false});
      features.push_back(y);
    }
    h = net.concat(fmt::format("features.denseblock{}.cat", b + 1), features);
    if (b + 1 < std::size(kBlocks)) {
      const std::string p = fmt::format("features.transition{}", b + 1);
      h = net.batch_norm(p + ".norm", h);
      h = net.relu(p + ".relu", h, true);
      h = net.conv(p + ".conv", h, {h.shape[1] / 2, {1, 1}, {}, {}, 1, false});
      h = net.avg_pool(p + ".pool", h, {{2, 2}, {2, 2}, {}, false});
    }
  }
  h = net.batch_norm("features.norm5", h);
  h = net.relu("relu", h, true);
  h = net.adaptive_avg_pool("avgpool", h, {1, 1});
  h = net.linear("classifier", Network::flatten(h), 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
