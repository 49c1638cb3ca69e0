#include "tests/support/workload_builder.hpp"

namespace memplan::test {

using namespace memplan::sim;

WorkloadBuilder::WorkloadBuilder(Bytes memory_bytes) {
  w_.provenance.source = "hand-written";
  w_.device.name = "test";
  w_.device.memory_bytes = memory_bytes;
}

TensorId WorkloadBuilder::tensor(const std::string& name, Bytes bytes, TensorKind kind,
                                 OpId producer) {
  Tensor t;
  t.id = static_cast<TensorId>(w_.tensors.size());
  t.name = name;
  t.bytes = bytes;
  t.kind = kind;
  t.producer = producer;
  w_.tensors.push_back(t);
  return t.id;
}

TensorId WorkloadBuilder::input(const std::string& name, Bytes bytes) {
  return tensor(name, bytes, TensorKind::kInput, kNoOp);
}
TensorId WorkloadBuilder::parameter(const std::string& name, Bytes bytes) {
  return tensor(name, bytes, TensorKind::kParameter, kNoOp);
}

TensorId WorkloadBuilder::optimizer_state(const std::string& name, Bytes bytes) {
  return tensor(name, bytes, TensorKind::kOptimizerState, kNoOp);
}

OpId WorkloadBuilder::op(const std::string& name, const std::string& layer, Phase phase,
                         const std::vector<TensorId>& inputs,
                         const std::vector<std::pair<std::string, Bytes>>& outputs,
                         Nanoseconds duration_ns, Bytes workspace_bytes) {
  Op op;
  op.id = static_cast<OpId>(w_.ops.size());
  op.name = name;
  op.layer = LayerType::named(layer);
  op.phase = phase;
  op.inputs = inputs;
  op.duration_ns = duration_ns;
  op.workspace_bytes = workspace_bytes;
  for (const auto& [out_name, bytes] : outputs) {
    op.outputs.push_back(
        tensor(out_name, bytes,
               phase == Phase::kForward ? TensorKind::kActivation : TensorKind::kGradient, op.id));
  }
  w_.ops.push_back(op);
  return op.id;
}

TensorId WorkloadBuilder::forward(const std::string& name, const std::vector<TensorId>& inputs,
                                  Bytes bytes, Nanoseconds duration_ns, const std::string& layer) {
  op(name, layer, Phase::kForward, inputs, {{name + "_out", bytes}}, duration_ns);
  return w_.ops.back().outputs.front();
}

TensorId WorkloadBuilder::forward_in_place(const std::string& name, TensorId base,
                                           Nanoseconds duration_ns, const std::string& layer) {
  const TensorId out = forward(name, {base}, w_.tensor(base).bytes, duration_ns, layer);
  w_.tensors[static_cast<std::size_t>(out)].in_place_of = base;
  return out;
}

TensorId WorkloadBuilder::backward(const std::string& name, const std::vector<TensorId>& inputs,
                                   Bytes bytes, Nanoseconds duration_ns, const std::string& layer) {
  op(name, layer, Phase::kBackward, inputs, {{name + "_out", bytes}}, duration_ns);
  return w_.ops.back().outputs.front();
}

Workload WorkloadBuilder::build() const {
  validate(w_, "test workload");
  return w_;
}

Workload two_micro_batches(Bytes map_bytes) {
  WorkloadBuilder b;
  const TensorId x = b.input("x", 512);
  const TensorId w = b.parameter("w", 512);
  TensorId gradient = kNoTensor;
  for (const std::string i : {"1", "2"}) {
    const TensorId f = b.forward("f" + i, {x, w}, map_bytes, 1000);
    const TensorId h = b.forward("h" + i, {f, w}, 512, 2000);
    const TensorId gh = b.backward("gh" + i, {h}, 512, 1000);
    std::vector<TensorId> inputs{gh, f};
    if (gradient != kNoTensor) inputs.push_back(gradient);
    const TensorId gf = b.backward("gf" + i, inputs, 512, 1500);
    if (gradient != kNoTensor) b.workload().tensors[index(gf)].in_place_of = gradient;
    gradient = gf;
  }
  b.op("sgd", "sgd", Phase::kUpdate, {w, gradient}, {}, 500);
  return b.build();
}

}  // namespace memplan::test
