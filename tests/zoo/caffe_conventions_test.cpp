// `memplan zoo --caffe`: Caffe's in-place ReLU backward and int32 max-pool masks.
#include <catch2/catch.hpp>

#include "tests/zoo/zoo_test_support.hpp"
#include "zoo/network.hpp"

using namespace memplan;
using memplan::test::build;
using memplan::test::op_named;
using memplan::test::tensor_named;

TEST_CASE("Caffe's conventions on VGG-16: every ReLU gradient in place, int32 masks",
          "[zoo][caffe]") {
  sim::Workload w = build("vgg16", 2).workload;
  const sim::Bytes mask_before = tensor_named(w, "features.4.indices").bytes;
  // VGG-16: 13 conv and 2 fc ReLUs, each backward reading a gradient no other op reads.
  CHECK(zoo::relu_backward_in_place(w) == 15);
  CHECK(zoo::int32_pool_indices(w) == 5);
  sim::validate(w, "vgg16 --caffe");
  const sim::Op& relu_bwd = op_named(w, "features.1_bwd");
  const sim::Tensor& grad = w.tensor(relu_bwd.outputs.front());
  CHECK(grad.in_place_of == relu_bwd.inputs.front());
  const sim::Tensor& mask = tensor_named(w, "features.4.indices");
  CHECK(mask.dtype == "int32");
  CHECK(mask.bytes * 2 == mask_before);
  // Applying them again changes nothing.
  CHECK(zoo::relu_backward_in_place(w) == 0);
  CHECK(zoo::int32_pool_indices(w) == 0);
}

TEST_CASE("a ReLU gradient that another op also reads stays out of place", "[zoo][caffe]") {
  // ResNet-50: the gradient of a block's input is summed over its two branches; every ReLU
  // backward whose incoming gradient is read elsewhere too keeps writing a new buffer, and the
  // result is a valid workload (validate() refuses overwriting a tensor read later).
  sim::Workload w = build("resnet50", 2).workload;
  const std::size_t relus = test::count_layer(w, "relu", sim::Phase::kBackward);
  const std::size_t changed = zoo::relu_backward_in_place(w);
  CHECK(changed > 0);
  CHECK(changed <= relus);
  sim::validate(w, "resnet50 --caffe");
  std::vector<int> readers(w.tensors.size(), 0);
  for (const sim::Op& op : w.ops)
    for (sim::TensorId t : op.inputs) ++readers[static_cast<std::size_t>(t)];
  for (const sim::Op& op : w.ops) {
    if (op.layer != sim::Layer::kRelu || op.phase != sim::Phase::kBackward) continue;
    const sim::Tensor& out = w.tensor(op.outputs.front());
    const bool in_place = out.in_place_of != sim::kNoTensor;
    CHECK(in_place == (readers[static_cast<std::size_t>(op.inputs.front())] == 1));
  }
}
