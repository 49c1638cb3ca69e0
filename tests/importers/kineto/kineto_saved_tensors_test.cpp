// What the importer takes autograd to save, on small CPU traces shaped as PyTorch 2.x's profiler
// writes them (issue 36: the importer against capture's exact count,
// bench/importer-vs-capture.py): concatenation (a tensor list, CatBackward keeps sizes only),
// dropout (its mask, not its input; bool where native_dropout ran), average pooling (the input,
// unless an adaptive pool to 1x1 ran as a mean), broadcasting elementwise ops (the broadcast
// shape; add and sub save nothing), matmul's output shape, and the tensor a squeeze-and-excitation
// scale multiplies.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/workload.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"

using memplan::sim::Op;
using memplan::sim::TensorId;
using memplan::sim::Workload;
using memplan::test::import_json;
using nlohmann::json;

// Named (not anonymous): the tests are built as one unity file beside kineto_synthetic_test.cpp.
namespace kineto_saved_test {

using Shape = std::vector<std::int64_t>;

struct Child {
  std::string name;
  json dims = json::array();
  json types = json::array();
};

struct Event {
  std::string name;
  json dims;                         // "Input Dims"
  int seq = -1;                      // "Sequence number"; -1: none
  bool backward = false;             // a backward node on the autograd thread
  std::vector<Child> children = {};  // ops nested inside it on its thread
  json types = nullptr;              // "Input type"; null: "float" for each shape, "" for the rest
};

json op_event(const std::string& name, std::int64_t tid, std::int64_t ts, std::int64_t dur,
              json args) {
  return {{"ph", "X"},  {"cat", "cpu_op"}, {"name", name}, {"pid", 1},
          {"tid", tid}, {"ts", ts},        {"dur", dur},   {"args", std::move(args)}};
}

// A CPU-only trace in the current format: one ProfilerStep#1 holding `events` one after another
// (each 50 us, its children inside it), forward ones on the main thread, backward nodes on the
// autograd thread.
json cpu_trace(const std::vector<Event>& events) {
  json list = json::array();
  std::int64_t t = 100;
  std::int64_t id = 1;
  for (const Event& e : events) {
    json types = e.types;
    if (types.is_null()) {
      types = json::array();
      for (const auto& d : e.dims) types.push_back(d.empty() ? "" : "float");
    }
    json args = {{"External id", id++}, {"Input Dims", e.dims}, {"Input type", types}};
    if (e.seq >= 0) args["Sequence number"] = e.seq;
    const std::int64_t tid = e.backward ? 2 : 1;
    list.push_back(op_event(e.backward ? "autograd::engine::evaluate_function: " + e.name : e.name,
                            tid, t, 50, args));
    std::int64_t c = t + 1;
    for (const Child& child : e.children) {
      list.push_back(op_event(
          child.name, tid, c, 5,
          {{"External id", id++}, {"Input Dims", child.dims}, {"Input type", child.types}}));
      c += 6;
    }
    t += 60;
  }
  list.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", "ProfilerStep#1"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", 50},
                  {"dur", t},
                  {"args", {{"External id", 0}}}});
  return {{"schemaVersion", 1}, {"traceEvents", list}};
}

const Op& op_named(const Workload& w, const std::string& name) {
  auto it = std::find_if(w.ops.begin(), w.ops.end(), [&](const Op& op) { return op.name == name; });
  REQUIRE(it != w.ops.end());
  return *it;
}

bool has_op(const Workload& w, const std::string& name) {
  return std::any_of(w.ops.begin(), w.ops.end(), [&](const Op& op) { return op.name == name; });
}

std::vector<std::string> names(const Workload& w, const std::vector<TensorId>& ids) {
  std::vector<std::string> out;
  for (TensorId id : ids) out.push_back(w.tensor(id).name);
  return out;
}

// What a backward op reads besides gradients: the tensors its forward op saved.
std::vector<std::string> saved(const Workload& w, const std::string& backward_op) {
  std::vector<std::string> out;
  for (TensorId id : op_named(w, backward_op).inputs) {
    const auto& t = w.tensor(id);
    if (t.kind == memplan::sim::TensorKind::kActivation ||
        t.kind == memplan::sim::TensorKind::kInput)
      out.push_back(t.name);
  }
  return out;
}

const Shape& output_shape(const Workload& w, const std::string& op) {
  return w.tensor(op_named(w, op).outputs.at(0)).shape;
}

TEST_CASE("cat reads each tensor of its list once and saves nothing",
          "[importers][kineto][saved]") {
  // A SqueezeNet fire module: squeeze, two expands, their concatenation, the next squeeze.
  const json tensor_list = json::array({"TensorList", "Scalar"});
  const Workload w = import_json(cpu_trace({
                                     {"aten::conv2d", json{{2, 8, 4, 4}, {2, 8, 1, 1}, {2}}, 1},
                                     {"aten::relu_", json{{2, 2, 4, 4}}, 2},
                                     {"aten::conv2d", json{{2, 2, 4, 4}, {4, 2, 1, 1}, {4}}, 3},
                                     {"aten::relu_", json{{2, 4, 4, 4}}, 4},
                                     {"aten::conv2d", json{{2, 2, 4, 4}, {4, 2, 3, 3}, {4}}, 5},
                                     {"aten::relu_", json{{2, 4, 4, 4}}, 6},
                                     {"aten::cat",
                                      json{json{{2, 4, 4, 4}, {2, 4, 4, 4}}, json::array()},
                                      7,
                                      false,
                                      {},
                                      tensor_list},
                                     {"aten::conv2d", json{{2, 8, 4, 4}, {2, 8, 1, 1}, {2}}, 8},
                                     {"ConvolutionBackward0", json{{2, 2, 4, 4}}, 8, true},
                                     {"CatBackward0", json{{2, 8, 4, 4}}, 7, true},
                                     {"ReluBackward0", json{{2, 4, 4, 4}}, 6, true},
                                 }))
                         .workload;
  const Op& cat = op_named(w, "concat_1");
  // Its two parts are the two expands' outputs, not one of them twice; the dim is the one the next
  // op reads the concatenation in (the parts alike, the profiler records no dim).
  CHECK(names(w, cat.inputs) == std::vector<std::string>{"relu_2.out", "relu_3.out"});
  CHECK(output_shape(w, "concat_1") == Shape{2, 8, 4, 4});
  CHECK(names(w, op_named(w, "conv2d_4").inputs).front() == "concat_1.out");
  CHECK(saved(w, "concat_1_bwd").empty());
  CHECK(saved(w, "conv2d_4_bwd") == std::vector<std::string>{"concat_1.out"});
}

TEST_CASE("cat joins its parts along the extent in which they differ",
          "[importers][kineto][saved]") {
  const Workload w = import_json(cpu_trace({
                                     {"aten::relu", json{{2, 3, 4, 4}}, 1},
                                     {"aten::conv2d", json{{2, 3, 4, 4}, {5, 3, 1, 1}, {5}}, 2},
                                     {"aten::cat",
                                      json{json{{2, 3, 4, 4}, {2, 5, 4, 4}}, {}},
                                      3,
                                      false,
                                      {},
                                      json::array({"TensorList", "Scalar"})},
                                 }))
                         .workload;
  CHECK(output_shape(w, "concat_1") == Shape{2, 8, 4, 4});
  CHECK(names(w, op_named(w, "concat_1").inputs) ==
        std::vector<std::string>{"relu_1.out", "conv2d_1.out"});
}

TEST_CASE("dropout saves its mask, not its input", "[importers][kineto][saved]") {
  const json x{{4, 16}, json::array(), json::array()};
  // The CPU's dropout: a mask of the input's dtype (bernoulli_, scaled), then mul.
  const std::vector<Child> cpu = {{"aten::empty_like", json{{4, 16}}, json{"float"}},
                                  {"aten::bernoulli_", json{{4, 16}, {}}, json{"float", ""}},
                                  {"aten::div_", json{{4, 16}, {}}, json{"float", "Scalar"}},
                                  {"aten::mul", json{{4, 16}, {4, 16}}, json{"float", "float"}}};
  const std::vector<Child> fused = {{"aten::native_dropout", json{{4, 16}}, json{"float"}}};
  for (const auto& [children, dtype] :
       {std::pair{cpu, std::string("float32")}, std::pair{fused, std::string("bool")}}) {
    CAPTURE(dtype);
    const Workload w = import_json(cpu_trace({
                                       {"aten::gelu", json{{4, 16}, {}}, 1},
                                       {"aten::dropout", x, 2, false, children},
                                       {"aten::mm", json{{4, 16}, {16, 16}}, 3},
                                       {"MmBackward0", json{{4, 16}}, 3, true},
                                       {"MulBackward0", json{{4, 16}}, 2, true},
                                   }))
                           .workload;
    REQUIRE(saved(w, "dropout_1_bwd") == std::vector<std::string>{"dropout_1.mask"});
    const auto& mask = w.tensor(op_named(w, "dropout_1").outputs.at(1));
    CHECK(mask.dtype == dtype);
    CHECK(mask.shape == Shape{4, 16});
    CHECK(names(w, op_named(w, "mm_1").inputs).front() == "dropout_1.out");
  }
  // p = 0 (or eval): PyTorch returns the input, nothing ran, nothing saved.
  const Workload w = import_json(cpu_trace({
                                     {"aten::gelu", json{{4, 16}, {}}, 1},
                                     {"aten::dropout", x, 2},
                                     {"aten::mm", json{{4, 16}, {16, 16}}, 3},
                                     {"MmBackward0", json{{4, 16}}, 3, true},
                                 }))
                         .workload;
  CHECK(op_named(w, "dropout_1").outputs.size() == 1);
}

TEST_CASE("average pooling saves its input, unless an adaptive pool to 1x1 ran as a mean",
          "[importers][kineto][saved]") {
  auto pool_saves = [](const Event& pool) {
    const Workload w = import_json(cpu_trace({
                                       {"aten::relu", json{{2, 4, 8, 8}}, 1},
                                       pool,
                                       {"aten::flatten", json{{2, 4, 2, 2}, {}, {}}, -1},
                                       {"aten::mm", json{{2, 16}, {16, 3}}, 3},
                                       {"MmBackward0", json{{2, 3}}, 3, true},
                                       {"PoolBackward0", json{{2, 4, 2, 2}}, 2, true},
                                   }))
                           .workload;
    const std::string bwd =
        has_op(w, "avg_pool2d_1_bwd") ? "avg_pool2d_1_bwd" : "adaptive_avg_pool_1_bwd";
    return saved(w, bwd);
  };
  const std::vector<std::string> input{"relu_1.out"};
  CHECK(pool_saves({"aten::avg_pool2d", json{{2, 4, 8, 8}, {}, {}}, 2}) == input);
  CHECK(pool_saves({"aten::adaptive_avg_pool2d",
                    json{{2, 4, 8, 8}, {}},
                    2,
                    false,
                    {{"aten::_adaptive_avg_pool2d", json{{2, 4, 8, 8}, {}}, json{"float", ""}}}}) ==
        input);
  CHECK(pool_saves({"aten::adaptive_avg_pool2d",
                    json{{2, 4, 8, 8}, {}},
                    2,
                    false,
                    {{"aten::mean", json{{2, 4, 8, 8}, {}, {}, {}}, json{"float", "", "", ""}}}})
            .empty());
}

TEST_CASE("a squeeze-and-excitation scale: the broadcast product of the tensor it pooled",
          "[importers][kineto][saved]") {
  const std::vector<Child> mean = {{"aten::mean", json{{2, 4, 8, 8}, {}, {}, {}}, json::array()}};
  const Workload w =
      import_json(cpu_trace({
                      {"aten::batch_norm", json{{2, 4, 8, 8}, {4}, {4}, {4}, {4}}, 1},
                      {"aten::silu_", json{{2, 4, 8, 8}}, 2},
                      {"aten::adaptive_avg_pool2d", json{{2, 4, 8, 8}, {}}, 3, false, mean},
                      {"aten::conv2d", json{{2, 4, 1, 1}, {4, 4, 1, 1}, {4}}, 4},
                      {"aten::sigmoid", json{{2, 4, 1, 1}}, 5},
                      {"aten::mul", json{{2, 4, 1, 1}, {2, 4, 8, 8}}, 6},
                      {"aten::conv2d", json{{2, 4, 8, 8}, {2, 4, 1, 1}, {2}}, 7},
                      {"aten::add", json{{2, 2, 8, 8}, {2, 1, 1, 1}, {}}, 8},
                      {"AddBackward0", json{{2, 2, 8, 8}}, 8, true},
                      {"ConvolutionBackward0", json{{2, 2, 8, 8}}, 7, true},
                      {"MulBackward0", json{{2, 4, 8, 8}}, 6, true},
                  }))
          .workload;
  // The product has the broadcast shape, and multiplies the activation's output (the tensor the
  // pool read), not the batch norm's output of the same shape.
  CHECK(output_shape(w, "mul_1") == Shape{2, 4, 8, 8});
  CHECK(saved(w, "mul_1_bwd") == std::vector<std::string>{"sigmoid_1.out", "silu_1.out"});
  CHECK(names(w, op_named(w, "conv2d_2").inputs).front() == "mul_1.out");
  // A broadcast add is a generic op (no residual add) and saves nothing.
  CHECK(op_named(w, "aten::add_1").layer.generic());
  CHECK(output_shape(w, "aten::add_1") == Shape{2, 2, 8, 8});
  CHECK(saved(w, "aten::add_1_bwd").empty());
}

TEST_CASE("matmul's output is the product's shape", "[importers][kineto][saved]") {
  const Workload w = import_json(cpu_trace({
                                     {"aten::gelu", json{{2, 3, 5, 8}, {}}, 1},
                                     {"aten::matmul", json{{2, 3, 5, 8}, {8, 7}}, 2},
                                     {"aten::softmax", json{{2, 3, 5, 7}, {}, {}}, 3},
                                 }))
                         .workload;
  CHECK(output_shape(w, "matmul_1") == Shape{2, 3, 5, 7});
  CHECK(names(w, op_named(w, "softmax_1").inputs).front() == "matmul_1.out");
}

}  // namespace kineto_saved_test
