#include <catch2/catch.hpp>

#include "core/liveness.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;

TEST_CASE("in-place tensors share one buffer that lives until the last reader", "[sim][liveness]") {
  const Workload w = read_trace(memplan::test::source_path("traces/resnet_tiny.json"));
  const Liveness l = analyze_liveness(w);
  const Storage& s = l.storages[l.storage_of[11]];  // relu1_out, in place over conv1_out
  CHECK(s.root == TensorId{10});
  CHECK(s.tensors == std::vector<TensorId>{TensorId{10}, TensorId{11}});
  CHECK(s.first == OpId{0});  // conv1
  CHECK(s.last == OpId{18});  // relu1_bwd
  CHECK(l.storage_of[10] == l.storage_of[11]);
}

TEST_CASE("persistent tensors outlive the step, unread outputs die at once", "[sim][liveness]") {
  const Workload w = read_trace(memplan::test::source_path("traces/mlp4.json"));
  const Liveness l = analyze_liveness(w);
  CHECK(l.storages[l.storage_of[1]].first == kNoOp);  // w1 exists before the step
  CHECK(l.storages[l.storage_of[1]].last == op_id(w.ops.size()));
  const Storage& loss = l.storages[l.storage_of[13]];  // the loss value: nothing reads it
  CHECK(loss.first == OpId{7});
  CHECK(loss.last == OpId{7});
}
