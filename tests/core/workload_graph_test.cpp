#include <catch2/catch.hpp>

#include "core/workload_graph.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;

TEST_CASE("the op graph of a valid trace has no cycle and a topological order", "[sim][graph]") {
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  const WorkloadGraph g(w);
  CHECK_FALSE(g.find_cycle().has_value());
  const auto order = g.topological_order();
  REQUIRE(order.size() == w.ops.size());
  std::vector<std::size_t> position(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = i;
  for (const Op& op : w.ops) {
    for (TensorId t : op.inputs) {
      const OpId p = w.tensor(t).producer;
      if (p != kNoOp)
        CHECK(position[static_cast<std::size_t>(p)] < position[static_cast<std::size_t>(op.id)]);
    }
  }
}

TEST_CASE("ancestors of an op are everything it depends on", "[sim][graph]") {
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  const WorkloadGraph g(w);
  // add1 (op 5) reads conv3 (4) and relu1 (1); conv3 reads relu2 (3) <- conv2 (2) <- relu1 <- conv1
  // (0).
  CHECK(g.ancestors(OpId{5}) == std::vector<OpId>{OpId{0}, OpId{1}, OpId{2}, OpId{3}, OpId{4}});
  CHECK(g.ancestors(OpId{0}).empty());
}

TEST_CASE("a cycle is found and reported in order", "[sim][graph]") {
  Workload w;
  w.tensors = {{TensorId{0}, "a", 4, TensorKind::kActivation, {}, "", OpId{1}, kNoTensor},
               {TensorId{1}, "b", 4, TensorKind::kActivation, {}, "", OpId{0}, kNoTensor}};
  for (int id : {0, 1}) {
    Op op;
    op.id = OpId{id};
    op.name = id == 0 ? "f" : "g";
    op.layer = memplan::sim::Layer::kRelu;
    op.inputs = {TensorId{id}};
    op.outputs = {TensorId{1 - id}};
    w.ops.push_back(op);
  }
  const auto cycle = WorkloadGraph(w).find_cycle();
  REQUIRE(cycle.has_value());
  CHECK(cycle->size() == 2);
}
