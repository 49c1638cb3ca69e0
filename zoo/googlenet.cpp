// GoogLeNet (Szegedy et al. 2015) as torchvision builds it: every conv is BasicConv2d (conv without
// bias, batch-norm, in-place ReLU), max-pools in ceil mode, and torchvision's 3x3 in the "5x5"
// branch. The auxiliary classifiers are left out (torchvision's aux_logits=False, 6.62M
// parameters): they only matter in the first phase of the original training recipe.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {
namespace {

Value basic_conv(Network& net, const std::string& p, const Value& x, std::int64_t out,
                 std::int64_t k, std::int64_t stride = 1) {
  Value h = net.conv(p + ".conv", x, {out, {k, k}, {stride, stride}, {k / 2, k / 2}, 1, false});
  h = net.batch_norm(p + ".bn", h);
  return net.relu(p + ".relu", h, true);
}

struct InceptionSpec {
  const char* name;
  std::int64_t ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj;
};

Value inception(Network& net, const InceptionSpec& s, const Value& x) {
  const std::string p = s.name;
  const Value b1 = basic_conv(net, p + ".branch1", x, s.ch1x1, 1);
  Value b2 = basic_conv(net, p + ".branch2.0", x, s.ch3x3red, 1);
  b2 = basic_conv(net, p + ".branch2.1", b2, s.ch3x3, 3);
  Value b3 = basic_conv(net, p + ".branch3.0", x, s.ch5x5red, 1);
  b3 = basic_conv(net, p + ".branch3.1", b3, s.ch5x5, 3);
  Value b4 = net.max_pool(p + ".branch4.0", x, {{3, 3}, {1, 1}, {1, 1}, true});
  b4 = basic_conv(net, p + ".branch4.1", b4, s.pool_proj, 1);
  return net.concat(p + ".cat", {b1, b2, b3, b4});
}

}  // namespace

void build_googlenet(Network& net, const ModelOptions& options) {
  const Value x = net.input("image", {3, options.input[0], options.input[1]});
  const Value labels = net.int_input("labels", {});
  Value h = basic_conv(net, "conv1", x, 64, 7, 2);
  h = net.max_pool("maxpool1", h, {{3, 3}, {2, 2}, {}, true});
  h = basic_conv(net, "conv2", h, 64, 1);
  h = basic_conv(net, "conv3", h, 192, 3);
  h = net.max_pool("maxpool2", h, {{3, 3}, {2, 2}, {}, true});
  h = inception(net, {"inception3a", 64, 96, 128, 16, 32, 32}, h);
  h = inception(net, {"inception3b", 128, 128, 192, 32, 96, 64}, h);
  h = net.max_pool("maxpool3", h, {{3, 3}, {2, 2}, {}, true});
  h = inception(net, {"inception4a", 192, 96, 208, 16, 48, 64}, h);
  h = inception(net, {"inception4b", 160, 112, 224, 24, 64, 64}, h);
  h = inception(net, {"inception4c", 128, 128, 256, 24, 64, 64}, h);
  h = inception(net, {"inception4d", 112, 144, 288, 32, 64, 64}, h);
  h = inception(net, {"inception4e", 256, 160, 320, 32, 128, 128}, h);
  h = net.max_pool("maxpool4", h, {{2, 2}, {2, 2}, {}, true});
  h = inception(net, {"inception5a", 256, 160, 320, 32, 128, 128}, h);
  h = inception(net, {"inception5b", 384, 192, 384, 48, 128, 128}, h);
  h = net.adaptive_avg_pool("avgpool", h, {1, 1});
  h = net.dropout("dropout", Network::flatten(h));
  h = net.linear("fc", h, 1000);
  net.softmax_cross_entropy("loss", h, labels);
}

}  // namespace memplan::zoo
