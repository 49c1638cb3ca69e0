// What the importer takes autograd to save, on small CPU traces shaped as PyTorch 2.x's profiler
// writes them (issue 36: the importer against capture's exact count,
// bench/importer-vs-capture.py): concatenation (a tensor list, CatBackward keeps sizes only),
// dropout (its mask, not its input; bool where native_dropout ran), average pooling (the input,
// unless an adaptive pool to 1x1 ran as a mean), broadcasting elementwise ops (the broadcast
// shape; add and sub save nothing), matmul's output shape and the copies its reshapes made, the
// tensor a squeeze-and-excitation scale multiplies, layer norm's statistics, embedding's indices,
// what other generic ops keep (views nothing, sigmoid and softmax their output, masked_fill its
// mask, a product with a number nothing), and a contiguous() that copied.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/workload.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"
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
  int seq = -1;  // "Sequence number"; -1: none
};

struct Event {
  std::string name;
  json dims;                         // "Input Dims"
  int seq = -1;                      // "Sequence number"; -1: none
  bool backward = false;             // a backward node on the autograd thread
  std::vector<Child> children = {};  // ops nested inside it on its thread
  json types = nullptr;              // "Input type"; null: "float" for each shape, "" for the rest
  json concrete = nullptr;           // "Concrete Inputs"; null: none
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
    if (!e.concrete.is_null()) args["Concrete Inputs"] = e.concrete;
    const std::int64_t tid = e.backward ? 2 : 1;
    list.push_back(op_event(e.backward ? "autograd::engine::evaluate_function: " + e.name : e.name,
                            tid, t, 50, args));
    std::int64_t c = t + 1;
    for (const Child& child : e.children) {
      json child_args = {
          {"External id", id++}, {"Input Dims", child.dims}, {"Input type", child.types}};
      if (child.seq >= 0) child_args["Sequence number"] = child.seq;
      list.push_back(op_event(child.name, tid, c, 5, child_args));
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
  // p = 0 (or eval): PyTorch returns the input, nothing ran: no new tensor, nothing saved.
  const Workload w = import_json(cpu_trace({
                                     {"aten::gelu", json{{4, 16}, {}}, 1},
                                     {"aten::dropout", x, 2},
                                     {"aten::mm", json{{4, 16}, {16, 16}}, 3},
                                     {"MmBackward0", json{{4, 16}}, 3, true},
                                 }))
                         .workload;
  CHECK(op_named(w, "dropout_1").outputs.empty());
  CHECK(names(w, op_named(w, "mm_1").inputs).front() == "gelu_1.out");
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
                      {"SigmoidBackward0", json{{2, 4, 1, 1}}, 5, true},
                      {"ConvolutionBackward0", json{{2, 4, 1, 1}}, 4, true},
                      {"MeanBackward1", json{{2, 4, 1, 1}}, 3, true},
                      {"SiluBackward0", json{{2, 4, 8, 8}}, 2, true},
                      {"NativeBatchNormBackward0", json{{2, 4, 8, 8}}, 1, true},
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

TEST_CASE("layer norm keeps its input, mean and rstd; embedding its indices",
          "[importers][kineto][saved]") {
  const json layer_norm_types = json::array({"float", "ScalarList", "float", "float", "Scalar"});
  const Workload w =
      import_json(cpu_trace({
                      {"aten::embedding",
                       json{{50, 16}, {2, 8}, {}, {}, {}},
                       1,
                       false,
                       {},
                       json::array({"float", "long int", "Scalar", "Scalar", "Scalar"})},
                      {"aten::layer_norm",
                       json{{2, 8, 16}, {}, {16}, {16}, {}},
                       2,
                       false,
                       {},
                       layer_norm_types},
                      {"aten::linear", json{{2, 8, 16}, {4, 16}, {4}}, 3},
                      {"AddmmBackward0", json{{16, 4}}, 3, true},
                      {"NativeLayerNormBackward0", json{{2, 8, 16}}, 2, true},
                      {"EmbeddingBackward0", json{{2, 8, 16}}, 1, true},
                  }))
          .workload;
  CHECK(output_shape(w, "embedding_1") == Shape{2, 8, 16});
  CHECK(names(w, op_named(w, "layer_norm_1").inputs).front() == "embedding_1.out");
  CHECK(saved(w, "embedding_1_bwd") == std::vector<std::string>{"input1"});
  CHECK(w.tensor(op_named(w, "embedding_1_bwd").inputs.back()).dtype == "int64");
  CHECK(saved(w, "layer_norm_1_bwd") ==
        std::vector<std::string>{"embedding_1.out", "layer_norm_1.mean", "layer_norm_1.rstd"});
  CHECK(w.tensor(op_named(w, "layer_norm_1").outputs.at(1)).shape == Shape{2, 8, 1});
}

TEST_CASE("generic ops keep what their backward formula reads", "[importers][kineto][saved]") {
  const Workload w =
      import_json(
          cpu_trace({
              {"aten::gelu", json{{2, 4, 6}, {}}, 1},
              {"aten::transpose", json{{2, 4, 6}, {}, {}}, 2},
              {"aten::sigmoid", json{{2, 4, 6}}, 3},
              {"aten::div", json{{2, 4, 6}, {}}, 4, false, {}, json::array({"float", "Scalar"})},
              {"aten::masked_fill",
               json{{2, 4, 6}, {4, 6}, {}},
               5,
               false,
               {},
               json::array({"float", "bool", "Scalar"})},
              {"aten::softmax", json{{2, 4, 6}, {}, {}}, 6},
              {"SoftmaxBackward0", json{{2, 4, 6}}, 6, true},
              {"MaskedFillBackward0", json{{2, 4, 6}}, 5, true},
              {"DivBackward0", json{{2, 4, 6}}, 4, true},
              {"SigmoidBackward0", json{{2, 4, 6}}, 3, true},
              {"TransposeBackward0", json{{2, 4, 6}}, 2, true},
              {"GeluBackward0", json{{2, 4, 6}}, 1, true},
          }))
          .workload;
  CHECK(saved(w, "gelu_1_bwd") == std::vector<std::string>{"input0"});
  CHECK(saved(w, "transpose_1_bwd").empty());
  CHECK(saved(w, "sigmoid_1_bwd") == std::vector<std::string>{"sigmoid_1.out"});
  CHECK(saved(w, "div_1_bwd").empty());  // over a number
  CHECK(saved(w, "masked_fill_1_bwd") == std::vector<std::string>{"input1"});
  CHECK(saved(w, "softmax_1_bwd") == std::vector<std::string>{"softmax_1.out"});
}

TEST_CASE("copies a trace shows: matmul's reshape of a transpose, contiguous()",
          "[importers][kineto][saved]") {
  const json x{{2, 3, 5, 5}, json::array()};
  const std::vector<Child> copy = {{"aten::clone", x, json{"float", ""}}};
  const std::vector<Child> view = {{"aten::view", x, json{"float", ""}}};
  auto trace = cpu_trace({
      {"aten::gelu", json{{2, 3, 5, 5}, {}}, 1},
      {"aten::transpose", json{{2, 3, 5, 5}, {}, {}}, 2},
      {"aten::matmul", json{{2, 3, 5, 5}, {2, 3, 5, 5}}, 3},
      {"aten::contiguous", json{{2, 3, 5, 5}, {}}, -1, false, copy},
      {"aten::relu", json{{2, 3, 5, 5}}, 4},
      {"ReluBackward0", json{{2, 3, 5, 5}}, 4, true},
      {"BmmBackward0", json{{2, 3, 5, 5}}, 3, true},
      {"TransposeBackward0", json{{2, 3, 5, 5}}, 2, true},
      {"GeluBackward0", json{{2, 3, 5, 5}}, 1, true},
  });
  // The matmul's two reshapes, nested inside it: the first a view, the second a copy.
  auto& events = trace["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i]["name"] != "aten::matmul") continue;
    const std::int64_t ts = events[i]["ts"];
    events.push_back({{"ph", "X"},
                      {"cat", "cpu_op"},
                      {"name", "aten::reshape"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", ts + 1},
                      {"dur", 10},
                      {"args", {{"Input Dims", x}, {"Input type", {"float", ""}}}}});
    events.push_back({{"ph", "X"},
                      {"cat", "cpu_op"},
                      {"name", "aten::reshape"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", ts + 20},
                      {"dur", 10},
                      {"args", {{"Input Dims", x}, {"Input type", {"float", ""}}}}});
    events.push_back({{"ph", "X"},
                      {"cat", "cpu_op"},
                      {"name", "aten::clone"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", ts + 21},
                      {"dur", 5},
                      {"args", {{"Input Dims", x}, {"Input type", {"float", ""}}}}});
    break;
  }
  const Workload w = import_json(trace).workload;
  const auto kept = saved(w, "matmul_1_bwd");
  REQUIRE(kept.size() == 2);
  CHECK(kept[0] == "transpose_1.out");  // the chain; its reshape was a view
  CHECK(kept[1] == "matmul_1.copy1");
  // contiguous() that cloned is a new tensor, not the matmul's output under another name.
  const Op& contiguous = op_named(w, "contiguous_1");
  CHECK(names(w, contiguous.inputs) == std::vector<std::string>{"matmul_1.out"});
  CHECK(names(w, op_named(w, "relu_1").inputs) == std::vector<std::string>{"contiguous_1.out"});
}

TEST_CASE("a view's shape from its recorded arguments", "[importers][kineto][saved]") {
  auto shape_of = [](const std::string& op, const Shape& x, const std::vector<std::string>& args) {
    memplan::importers::CpuEvent e;
    e.name = "aten::" + op;
    e.input_dims = {x};
    e.concrete_inputs = args;
    e.concrete_inputs.insert(e.concrete_inputs.begin(), "");
    return memplan::importers::detail::view_shape(e);
  };
  const Shape x{4, 48, 8, 8};
  CHECK(shape_of("view", x, {"[4, 2, 24, 8, 8]"}) == Shape{4, 2, 24, 8, 8});
  CHECK(shape_of("reshape", x, {"[4, -1]"}) == Shape{4, 3072});
  CHECK(shape_of("view", x, {"[5, -1]"}) == std::nullopt);  // does not divide
  CHECK(shape_of("transpose", Shape{4, 2, 24, 8, 8}, {"1", "2"}) == Shape{4, 24, 2, 8, 8});
  CHECK(shape_of("transpose", x, {"-2", "-1"}) == Shape{4, 48, 8, 8});
  CHECK(shape_of("permute", x, {"[0, 2, 3, 1]"}) == Shape{4, 8, 8, 48});
  CHECK(shape_of("unsqueeze", x, {"-1"}) == Shape{4, 48, 8, 8, 1});
  CHECK(shape_of("squeeze", Shape{4, 1, 8}, {"1"}) == Shape{4, 8});
  CHECK(shape_of("flatten", x, {"1", "-1"}) == Shape{4, 3072});
  CHECK(shape_of("select", Shape{3, 36, 3, 49, 32}, {"0", "1"}) == Shape{36, 3, 49, 32});
  CHECK(shape_of("slice", Shape{4, 21, 21, 96}, {"1", "0", "16", "1"}) == Shape{4, 16, 21, 96});
  CHECK(shape_of("slice", x, {"1", "0", "9223372036854775807", "2"}) == Shape{4, 24, 8, 8});
  CHECK(shape_of("chunk", x, {"2", "1"}) == Shape{4, 24, 8, 8});
  CHECK(shape_of("split", x, {"24", "1"}) == Shape{4, 24, 8, 8});
  CHECK(shape_of("expand", Shape{4, 1, 8}, {"[-1, 3, 8]"}) == Shape{4, 3, 8});
  CHECK(shape_of("pad", Shape{4, 16, 16, 96}, {"[0, 0, 0, 5, 0, 5]", "", ""}) ==
        Shape{4, 21, 21, 96});
  CHECK(shape_of("transpose", x, {"1", "7"}) == std::nullopt);  // no such dim
  CHECK(shape_of("gelu", x, {""}) == std::nullopt);             // no view
}

TEST_CASE("a channel shuffle: the views' shapes and the copy the branch reads",
          "[importers][kineto][saved]") {
  const json scalars = json::array({"float", "Scalar", "Scalar"});
  const std::vector<Child> clone = {{"aten::clone", json{{2, 4, 2, 3, 3}, {}}, json{"float", ""}}};
  const Workload w =
      import_json(cpu_trace({
                      {"aten::relu", json{{2, 8, 3, 3}}, 1},
                      {"aten::view",
                       json{{2, 8, 3, 3}, {}},
                       -1,
                       false,
                       {},
                       json::array({"float", "ScalarList"}),
                       json::array({"", "[2, 2, 4, 3, 3]"})},
                      {"aten::transpose",
                       json{{2, 2, 4, 3, 3}, {}, {}},
                       2,
                       false,
                       {},
                       scalars,
                       json::array({"", "1", "2"})},
                      {"aten::contiguous", json{{2, 4, 2, 3, 3}, {}}, -1, false, clone},
                      {"aten::view",
                       json{{2, 4, 2, 3, 3}, {}},
                       -1,
                       false,
                       {},
                       json::array({"float", "ScalarList"}),
                       json::array({"", "[2, 8, 3, 3]"})},
                      {"aten::chunk",
                       json{{2, 8, 3, 3}, {}, {}},
                       3,
                       false,
                       {},
                       scalars,
                       json::array({"", "2", "1"})},
                      {"aten::conv2d", json{{2, 4, 3, 3}, {4, 4, 1, 1}, {4}}, 4},
                      {"ConvolutionBackward0", json{{2, 4, 3, 3}}, 4, true},
                  }))
          .workload;
  // view, transpose and chunk are views (no ops); the contiguous() copied; the convolution reads
  // a half of the copy (its storage) and keeps it, not the ReLU's output.
  CHECK_FALSE(has_op(w, "transpose_1"));
  CHECK_FALSE(has_op(w, "chunk_1"));
  CHECK(names(w, op_named(w, "contiguous_1").inputs) == std::vector<std::string>{"relu_1.out"});
  CHECK(output_shape(w, "contiguous_1") == Shape{2, 4, 2, 3, 3});
  CHECK(saved(w, "conv2d_1_bwd") == std::vector<std::string>{"contiguous_1.out"});
}

TEST_CASE("a product with what no node made keeps that factor alone; a view's node is the view's",
          "[importers][kineto][saved]") {
  // Swin's stochastic depth, `x * noise` (noise = empty().bernoulli_(p).div_(p): no autograd node,
  // each recording the number the product's node then takes), and its attention mask,
  // `mask.masked_fill(mask != 0, -100)` of tensors that need no gradient, whose number (the next
  // node's) the `view` of the scores after it takes: that ViewBackward0 is the view's node.
  const json scalars = json::array({"float", "Scalar", ""});
  const Workload w =
      import_json(cpu_trace({
                      {"aten::gelu", json{{2, 4, 8}, {}}, 1},
                      {"aten::bernoulli_", json{{2, 1, 1}, {}, {}}, 2, false, {}, scalars},
                      {"aten::div_", json{{2, 1, 1}, {}}, 2},
                      {"aten::mul", json{{2, 4, 8}, {2, 1, 1}}, 2},
                      {"aten::sub", json{{3, 1, 4}, {3, 4, 1}, {}}, 3},
                      {"aten::ne", json{{3, 4, 4}, {}}, 3},
                      {"aten::masked_fill",
                       json{{3, 4, 4}, {3, 4, 4}, {}},
                       3,
                       false,
                       {},
                       json::array({"float", "bool", ""})},
                      {"aten::view",
                       json{{2, 4, 8}, {}},
                       3,
                       false,
                       {},
                       json::array({"float", "ScalarList"}),
                       json::array({"", "[8, 8]"})},
                      {"ViewBackward0", json{{8, 8}}, 3, true},
                      {"MulBackward0", json{{2, 4, 8}}, 2, true},
                      {"GeluBackward0", json{{2, 4, 8}}, 1, true},
                  }))
          .workload;
  // The product's backward reads the noise (div_'s output), not gelu's [2, 4, 8] output.
  const std::vector<std::string> product = saved(w, "mul_1_bwd");
  REQUIRE(product.size() == 1);
  CHECK(product.front() == "div_1.out");
  // The masked_fill made no node: no backward op, and its mask is kept by none.
  CHECK_FALSE(has_op(w, "masked_fill_1_bwd"));
  CHECK(saved(w, "gelu_1_bwd") == std::vector<std::string>{"input0"});
}

TEST_CASE("an op after side work of other shapes reads the tensor made for it, not an older one",
          "[importers][kineto][saved]") {
  // x = silu(input) * se(x), then a residual branch under stochastic depth: the convolution after
  // the noise (bernoulli_, div_: [2, 1, 1, 1]) reads the scaled tensor, which nothing has read
  // yet, not silu's output that the pool read.
  const std::vector<Child> mean = {{"aten::mean", json{{2, 4, 8, 8}, {}, {}, {}}, json::array()}};
  const json scalars = json::array({"float", "Scalar", ""});
  const Workload w =
      import_json(cpu_trace({
                      {"aten::silu", json{{2, 4, 8, 8}}, 1},
                      {"aten::adaptive_avg_pool2d", json{{2, 4, 8, 8}, {}}, 2, false, mean},
                      {"aten::sigmoid", json{{2, 4, 1, 1}}, 3},
                      {"aten::mul", json{{2, 4, 8, 8}, {2, 4, 1, 1}}, 4},
                      {"aten::bernoulli_", json{{2, 1, 1, 1}, {}, {}}, 5, false, {}, scalars},
                      {"aten::div_", json{{2, 1, 1, 1}, {}}, 5},
                      {"aten::conv2d", json{{2, 4, 8, 8}, {4, 4, 3, 3}, {4}}, 5},
                      {"ConvolutionBackward0", json{{2, 4, 8, 8}}, 5, true},
                      {"MulBackward0", json{{2, 4, 8, 8}}, 4, true},
                      {"SigmoidBackward0", json{{2, 4, 1, 1}}, 3, true},
                      {"MeanBackward1", json{{2, 4, 1, 1}}, 2, true},
                      {"SiluBackward0", json{{2, 4, 8, 8}}, 1, true},
                  }))
          .workload;
  CHECK(names(w, op_named(w, "mul_1").inputs).front() == "silu_1.out");
  CHECK(names(w, op_named(w, "conv2d_1").inputs).front() == "mul_1.out");
  CHECK(saved(w, "conv2d_1_bwd") == std::vector<std::string>{"mul_1.out"});
}

TEST_CASE("an in-place op on a view: its node runs inside CopySlices",
          "[importers][kineto][saved]") {
  // EfficientNet's classifier: Dropout(inplace=True) on flatten's view. The in-place mul_ makes
  // MulBackward0 (number 3), which autograd wraps in a CopySlices node on the view's base
  // (number 4), and the view gets an AsStridedBackward0 (number 5); the profiler records the
  // CopySlices node with MulBackward0 nested inside it.
  const std::vector<Child> cpu = {{"aten::empty_like", json{{2, 8}}, json{"float"}, 3},
                                  {"aten::bernoulli_", json{{2, 8}, {}}, json{"float", ""}, 3},
                                  {"aten::div_", json{{2, 8}, {}}, json{"float", "Scalar"}, 3},
                                  {"aten::mul_", json{{2, 8}, {2, 8}}, json{"float", "float"}, 3}};
  const std::vector<Child> wrapped = {
      {"torch::autograd::CopySlices", json{{2, 8, 1, 1}}, json{"float"}, 4},
      {"MulBackward0", json{{2, 8}}, json{"float"}, 3}};
  const Workload w =
      import_json(cpu_trace({
                      {"aten::gelu", json{{2, 8, 1, 1}, {}}, 1},
                      {"aten::flatten",
                       json{{2, 8, 1, 1}, {}, {}},
                       2,
                       false,
                       {},
                       json::array({"float", "Scalar", "Scalar"}),
                       json::array({"", "1", "-1"})},
                      {"aten::dropout_", json{{2, 8}, {}, {}}, 3, false, cpu},
                      {"aten::mm", json{{2, 8}, {8, 8}}, 6},
                      {"MmBackward0", json{{2, 8}}, 6, true},
                      {"AsStridedBackward0", json{{2, 8}}, 5, true},
                      {"torch::autograd::CopySlices", json{{2, 8, 1, 1}}, 4, true, wrapped},
                      {"GeluBackward0", json{{2, 8, 1, 1}}, 1, true},
                  }))
          .workload;
  // The dropout's backward op reads its mask (the CPU's: float).
  REQUIRE(saved(w, "dropout_1_bwd") == std::vector<std::string>{"dropout_1.mask"});
  CHECK(w.tensor(op_named(w, "dropout_1").outputs.at(1)).dtype == "float32");
}

TEST_CASE("a loss reads a target of its own, not an input of that shape the model read",
          "[importers][kineto][saved]") {
  // A model that embeds 16 ids ([16], int64) and classifies them: its targets ([16], int64) have
  // the ids' shape, but the model read the ids, and the loss reads the batch's other tensor.
  const Workload w =
      import_json(cpu_trace({
                      {"aten::embedding",
                       json{{50, 8}, {16}, {}, {}, {}},
                       1,
                       false,
                       {},
                       json::array({"float", "long int", "Scalar", "Scalar", "Scalar"})},
                      {"aten::linear", json{{16, 8}, {4, 8}, {4}}, 2},
                      {"aten::cross_entropy_loss",
                       json{{16, 4}, {16}, {}, {}, {}, {}},
                       3,
                       false,
                       {},
                       json::array({"float", "long int", "", "Scalar", "Scalar", "Scalar"})},
                      {"NllLossBackward0", json{{}}, 3, true},
                      {"AddmmBackward0", json{{16, 4}}, 2, true},
                      {"EmbeddingBackward0", json{{16, 8}}, 1, true},
                  }))
          .workload;
  CHECK(saved(w, "embedding_1_bwd") == std::vector<std::string>{"input1"});  // the ids
  const std::vector<std::string> loss = saved(w, "softmax_cross_entropy_1_bwd");
  REQUIRE(loss.size() == 2);
  CHECK(loss.back() == "input2");
}

}  // namespace kineto_saved_test
