// AlexNet as torchvision builds it (Krizhevsky 2014 "one weird trick" variant: 64-192-384-256-256
// filters, no LRN), ReLU(inplace=True), adaptive average pooling to 6x6, dropout before fc6/fc7.
#include "zoo/models.hpp"

namespace memplan::zoo {

void build_alexnet(Network& net, const ModelOptions& options) {
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = net.conv("features.0", x, {64, {11, 11}, {4, 4}, {2, 2}, 1, true});
  h = net.relu("features.1", h, true);
  h = net.max_pool("features.2", h, {{3, 3}, {2, 2}, {}, false});
  h = net.conv("features.3", h, {192, {5, 5}, {1, 1}, {2, 2}, 1, true});
  h = net.relu("features.4", h, true);
  h = net.max_pool("features.5", h, {{3, 3}, {2, 2}, {}, false});
  h = net.conv("features.6", h, {384, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("features.7", h, true);
  h = net.conv("features.8", h, {256, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("features.9", h, true);
  h = net.conv("features.10", h, {256, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("features.11", h, true);
  h = net.max_pool("features.12", h, {{3, 3}, {2, 2}, {}, false});
  h = net.adaptive_avg_pool("avgpool", h, {6, 6});
  h = net.dropout("classifier.0", Network::flatten(h));
  h = net.linear("classifier.1", h, 4096);
  h = net.relu("classifier.2", h, true);
  h = net.dropout("classifier.3", h);
  h = net.linear("classifier.4", h, 4096);
  h = net.relu("classifier.5", h, true);
  h = net.linear("classifier.6", h, 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
