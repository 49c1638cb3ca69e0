#include "tests/search/policy_workloads.hpp"

#include "tests/support/workload_builder.hpp"

namespace memplan::test {

using namespace memplan::sim;

LayerSpec conv(const std::string& name, Bytes bytes, Nanoseconds ns) {
  return {name, "conv2d", bytes, ns, 2 * ns, true, false};
}
LayerSpec relu(const std::string& name, Bytes bytes, Nanoseconds ns) {
  return {name, "relu", bytes, ns, ns, false, true};
}
LayerSpec pool(const std::string& name, Bytes bytes, Nanoseconds ns) {
  return {name, "max_pool2d", bytes, ns, ns, true, false};
}
LayerSpec linear(const std::string& name, Bytes bytes, Nanoseconds ns) {
  return {name, "linear", bytes, ns, 2 * ns, true, false};
}
LayerSpec loss(const std::string& name, Bytes bytes, Nanoseconds ns) {
  return {name, "softmax_cross_entropy", bytes, ns, ns, true, false};
}

Workload layer_chain(const std::vector<LayerSpec>& layers, Bytes memory_bytes, Bytes input_bytes) {
  WorkloadBuilder b(memory_bytes);
  std::vector<TensorId> in{b.input("x", input_bytes)};
  std::vector<TensorId> out;
  for (const LayerSpec& l : layers) {
    out.push_back(b.forward(l.name, {in.back()}, l.out_bytes, l.forward_ns, l.type));
    in.push_back(out.back());
  }
  TensorId grad = kNoTensor;
  for (std::size_t k = layers.size(); k-- > 0;) {
    const LayerSpec& l = layers[k];
    std::vector<TensorId> reads;
    if (grad != kNoTensor) reads.push_back(grad);
    if (l.saves_input) reads.push_back(in[k]);
    if (l.saves_output) reads.push_back(out[k]);
    const Bytes grad_bytes = b.workload().tensor(in[k]).bytes;
    grad = b.backward(l.name + "_bwd", reads, grad_bytes, l.backward_ns, l.type);
    b.workload().ops.back().differentiates = static_cast<OpId>(k);
  }
  return b.build();
}

Workload fan(std::array<Nanoseconds, 4> forward_ns, std::array<Nanoseconds, 4> backward_ns,
             Bytes memory_bytes) {
  WorkloadBuilder b(memory_bytes);
  const TensorId x = b.input("x", 1024);
  const TensorId a = b.forward("f1", {x}, 1024, forward_ns[0]);
  const TensorId bb = b.forward("f2", {x}, 1024, forward_ns[1]);
  const TensorId c = b.forward("f3", {x}, 1024, forward_ns[2]);
  const TensorId d = b.forward("f4", {x}, 1024, forward_ns[3]);
  const TensorId g1 = b.backward("h1", {d}, 512, backward_ns[0]);
  const TensorId g2 = b.backward("h2", {g1, bb}, 512, backward_ns[1]);
  const TensorId g3 = b.backward("h3", {g2, a}, 512, backward_ns[2]);
  b.backward("h4", {g3, c, x}, 512, backward_ns[3]);
  return b.build();
}

}  // namespace memplan::test
