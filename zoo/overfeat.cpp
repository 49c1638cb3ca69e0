// OverFeat "fast" model (Sermanet et al. 2014, table 1): 231x231 input, 96-256-512-1024-1024
// filters, fc 3072-4096-1000 with dropout on fc6 and fc7, about 146M parameters. There is no
// torchvision version; ReLUs are in place as in the Caffe/Torch7 models vDNN measured.
#include "zoo/models.hpp"

namespace memplan::zoo {

void build_overfeat(Network& net, const ModelOptions& options) {
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = net.conv("conv1", x, {96, {11, 11}, {4, 4}, {}, 1, true});
  h = net.relu("relu1", h, true);
  h = net.max_pool("pool1", h, {{2, 2}, {2, 2}, {}, false});
  h = net.conv("conv2", h, {256, {5, 5}, {1, 1}, {}, 1, true});
  h = net.relu("relu2", h, true);
  h = net.max_pool("pool2", h, {{2, 2}, {2, 2}, {}, false});
  h = net.conv("conv3", h, {512, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("relu3", h, true);
  h = net.conv("conv4", h, {1024, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("relu4", h, true);
  h = net.conv("conv5", h, {1024, {3, 3}, {1, 1}, {1, 1}, 1, true});
  h = net.relu("relu5", h, true);
  h = net.max_pool("pool5", h, {{2, 2}, {2, 2}, {}, false});
  h = net.linear("fc6", Network::flatten(h), 3072);
  h = net.relu("relu6", h, true);
  h = net.dropout("drop6", h);
  h = net.linear("fc7", h, 4096);
  h = net.relu("relu7", h, true);
  h = net.dropout("drop7", h);
  h = net.linear("fc8", h, 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
