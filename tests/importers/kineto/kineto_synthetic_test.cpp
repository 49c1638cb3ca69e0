// The importer on small hand-made traces in both formats: dataflow, device times, step choice,
// CPU-only traces and every kind of bad input; and its layers, which are core/aten_layers.hpp's
// read with the recorded shapes: conv3d is conv3d, conv1d a generic op built by the convolution
// rule (Note [conv1d]), any other forward op the table's layer or a generic op named by its aten
// name.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/aten_layers.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/recorded_step.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"

using memplan::importers::import_kineto;
using memplan::importers::ImportOptions;
using memplan::importers::parse_kineto_trace;
using memplan::sim::InputError;
using memplan::sim::Layer;
using memplan::sim::Phase;
using memplan::sim::TensorKind;
using memplan::sim::Workload;
using memplan::test::import_json;
using memplan::test::synthetic_kineto;
using memplan::test::SyntheticOptions;
using nlohmann::json;

namespace {

std::vector<std::string> layers(const memplan::sim::Workload& w, Phase phase) {
  std::vector<std::string> out;
  for (const auto& op : w.ops) {
    if (op.phase == phase) out.push_back(op.layer.str());
  }
  return out;
}

std::string import_error(const std::string& text, const ImportOptions& options = {}) {
  try {
    const auto trace = parse_kineto_trace(text, "bad.json");
    (void)import_kineto(trace, options, "bad.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

struct Event {
  std::string name;
  json dims;              // "Input Dims"
  int seq = -1;           // "Sequence number"; -1: none
  bool backward = false;  // a backward node on the autograd thread
};

// A CPU-only trace in the current format: one ProfilerStep#1 holding `events` one after another,
// forward ones on the main thread, backward nodes on the autograd thread.
json cpu_trace(const std::vector<Event>& events) {
  json list = json::array();
  std::int64_t t = 100;
  for (const Event& e : events) {
    json types = json::array();
    for (const auto& d : e.dims) types.push_back(d.empty() ? "" : "float");
    json args = {{"External id", t}, {"Input Dims", e.dims}, {"Input type", types}};
    if (e.seq >= 0) args["Sequence number"] = e.seq;
    list.push_back(
        {{"ph", "X"},
         {"cat", "cpu_op"},
         {"name", e.backward ? "autograd::engine::evaluate_function: " + e.name : e.name},
         {"pid", 1},
         {"tid", e.backward ? 2 : 1},
         {"ts", t},
         {"dur", 10},
         {"args", args}});
    t += 20;
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

std::vector<std::string> tensor_names(const Workload& w,
                                      const std::vector<memplan::sim::TensorId>& ids) {
  std::vector<std::string> names;
  for (auto id : ids) names.push_back(w.tensor(id).name);
  return names;
}

const memplan::sim::Op& op_named(const memplan::sim::Workload& w, const std::string& name) {
  auto it =
      std::find_if(w.ops.begin(), w.ops.end(), [&](const auto& op) { return op.name == name; });
  REQUIRE(it != w.ops.end());
  return *it;
}

}  // namespace

TEST_CASE("current format: layer ops, backward ops, optimizer and device times",
          "[importers][kineto]") {
  const auto r = import_json(synthetic_kineto());
  const auto& w = r.workload;
  CHECK(layers(w, Phase::kForward) ==
        std::vector<std::string>{"conv2d", "batch_norm", "relu", "conv2d", "batch_norm", "add",
                                 "relu", "adaptive_avg_pool", "linear", "softmax_cross_entropy"});
  CHECK(layers(w, Phase::kBackward) ==
        std::vector<std::string>{"softmax_cross_entropy", "linear", "adaptive_avg_pool", "relu",
                                 "add", "batch_norm", "conv2d", "relu", "batch_norm", "conv2d"});
  CHECK(layers(w, Phase::kUpdate) == std::vector<std::string>{"sgd"});
  CHECK(r.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
  CHECK(r.report.persistent_grads);
  CHECK(r.report.optimizer_states_per_parameter == 1);
  CHECK(w.provenance.source == "imported");
  CHECK(w.provenance.file == "synthetic.json");
  CHECK(w.provenance.step == 1);
  CHECK(w.device.name == "Test GPU");
  // The residual add reads the second batch norm's output and the first ReLU's (the skip).
  const auto& add = op_named(w, "add_1");
  REQUIRE(add.inputs.size() == 2);
  CHECK(w.tensor(add.inputs[0]).name == "batch_norm_2.out");
  CHECK(w.tensor(add.inputs[1]).name == "relu_1.out");
  // Every backward op differentiates a forward op of its own layer type.
  for (const auto& op : w.ops) {
    if (op.phase != Phase::kBackward) continue;
    REQUIRE(op.differentiates != memplan::sim::kNoOp);
    CHECK(w.op(op.differentiates).layer == op.layer);
  }
  // The skip's gradient is the sum of two contributions: the add passes its output's gradient
  // through, and conv2's backward (the other reader of relu_1.out) adds its own to it.
  const auto& conv2_bwd = op_named(w, "conv2d_2_bwd");
  CHECK(std::count_if(conv2_bwd.inputs.begin(), conv2_bwd.inputs.end(),
                      [&](auto t) { return w.tensor(t).name == "grad.add_1.out"; }) == 1);
  CHECK(w.tensor(conv2_bwd.outputs[0]).name == "grad.relu_1.out");
  // Scratch memory allocated and freed inside the op becomes its workspace: the op's peak above
  // its start (256 bytes) less what it keeps (its 64-byte output), so output + workspace = peak.
  CHECK(op_named(w, "relu_1").workspace_bytes == 256 - 64);
  // In-place ReLU over the batch norm's output.
  const auto& relu = op_named(w, "relu_1");
  CHECK(w.tensor(relu.outputs[0]).in_place_of == relu.inputs[0]);
}

TEST_CASE("the 2021 format gives the same workload", "[importers][kineto]") {
  SyntheticOptions old;
  old.current_format = false;
  auto a = import_json(synthetic_kineto()).workload;
  auto b = import_json(synthetic_kineto(old)).workload;
  a.provenance.note.clear();
  b.provenance.note.clear();
  CHECK(a == b);
}

TEST_CASE("kernels linked only by ac2g flows", "[importers][kineto]") {
  SyntheticOptions o;
  o.flows_only = true;
  const auto r = import_json(synthetic_kineto(o));
  CHECK(r.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
}

TEST_CASE("recorded step: busy time and Total Allocated", "[importers][kineto]") {
  const json doc = synthetic_kineto();
  const auto trace = parse_kineto_trace(doc.dump(), "synthetic.json");
  const auto r = import_kineto(trace, {}, "synthetic.json");
  const auto rec = memplan::importers::measure_recorded_step(trace, r.report.step, true);
  CHECK(rec.device_busy_ns == memplan::test::synthetic_step_kernel_ns());
  std::int64_t most = 0;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.value("name", "") == "[memory]")
      most = std::max(most, e.at("args").at("Total Allocated").get<std::int64_t>());
  }
  REQUIRE(rec.peak_total_allocated_bytes.has_value());
  CHECK(*rec.peak_total_allocated_bytes == most);
  CHECK(rec.peak_above_start_bytes == most - 500000);
}

TEST_CASE("a CPU-only trace gives a CPU workload timed by CPU durations", "[importers][kineto]") {
  SyntheticOptions o;
  o.gpu = false;
  const auto r = import_json(synthetic_kineto(o));
  CHECK_FALSE(r.report.gpu);
  CHECK(r.workload.device.name == "cpu");
  CHECK(layers(r.workload, Phase::kForward).size() == 10);
  // 26 top-level events of 40 us each, all kept or folded.
  CHECK(r.report.op_time_ns == 26 * 40'000);
}

// The default was the first complete step until the median rule (Note [Default step]): these
// three steps are equally long, so the median is the first of them, as before; the median of
// unequal ones is kineto_multirank_test.cpp's.
TEST_CASE(
    "several steps: the median complete one by default (of equal ones the first), or the "
    "one asked for",
    "[importers][kineto]") {
  SyntheticOptions o;
  o.steps = 3;
  const json doc = synthetic_kineto(o);
  const auto chosen = import_json(doc);
  CHECK(chosen.workload.provenance.step == 1);
  CHECK(chosen.report.step_reason == "the median of 3 complete steps (1.3, 1.3, 1.3 ms)");
  ImportOptions second;
  second.step = 2;
  const auto r = import_json(doc, second);
  CHECK(r.workload.provenance.step == 2);
  CHECK(r.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
  ImportOptions missing;
  missing.step = 9;
  const std::string e = import_error(doc.dump(), missing);
  CHECK(e.find("no ProfilerStep#9") != std::string::npos);
  CHECK(e.find("#1, #2, #3") != std::string::npos);

  // Drop the kernels of step 1: it is incomplete, so step 2 is taken (of steps 2 and 3, equally
  // long, the first).
  json cut = doc;
  auto& ev = cut.at("traceEvents");
  std::int64_t step1_end = 0;
  for (const auto& e1 : ev) {
    if (e1.value("name", "") == "ProfilerStep#1")
      step1_end = e1.at("ts").get<std::int64_t>() + e1.at("dur").get<std::int64_t>();
  }
  ev.erase(std::remove_if(ev.begin(), ev.end(),
                          [&](const json& e1) {
                            return e1.value("cat", "") == "kernel" &&
                                   e1.at("ts").get<std::int64_t>() < step1_end;
                          }),
           ev.end());
  CHECK(import_json(cut).workload.provenance.step == 2);
}

TEST_CASE("bad input: a clear error, never a crash", "[importers][kineto][bad_input]") {
  const std::string good = synthetic_kineto().dump();
  SECTION("truncated JSON") {
    CHECK(import_error(good.substr(0, good.size() / 2)).find("not valid JSON") !=
          std::string::npos);
  }
  SECTION("a number too large for JSON (found by the fuzzer)") {
    CHECK(import_error(R"({"traceEvents": [{"ph": "X", "ts": 1400e01475}]})")
              .find("not valid JSON (number overflow") != std::string::npos);
  }
  SECTION("not a profiler trace") {
    CHECK(import_error(R"({"ops": []})").find("no 'traceEvents'") != std::string::npos);
    CHECK(import_error("42").find("expected an object") != std::string::npos);
  }
  SECTION("no steps") {
    json doc = synthetic_kineto();
    auto& ev = doc.at("traceEvents");
    ev.erase(std::remove_if(
                 ev.begin(), ev.end(),
                 [](const json& e) { return e.value("name", "").rfind("ProfilerStep#", 0) == 0; }),
             ev.end());
    CHECK(import_error(doc.dump()).find("no 'ProfilerStep#N' events") != std::string::npos);
  }
  SECTION("an empty trace") {
    CHECK(import_error(R"({"traceEvents": []})").find("no 'ProfilerStep#N' events") !=
          std::string::npos);
  }
  SECTION("a step without forward ops (no aten operator)") {
    // Without shapes the time side alone is imported (kineto_host_side_test.cpp); without any
    // aten operator there is no forward pass at all.
    json doc = synthetic_kineto();
    for (auto& e : doc.at("traceEvents")) {
      const std::string name = e.value("name", "");
      if (name.rfind("aten::", 0) == 0) e["name"] = "custom::" + name.substr(6);
    }
    CHECK(import_error(doc.dump()).find("has no forward layer op") != std::string::npos);
  }
  SECTION("missing and mistyped fields") {
    auto with = [&](auto edit) {
      json doc = synthetic_kineto();
      for (auto& e : doc.at("traceEvents")) {
        if (edit(e)) break;
      }
      return import_error(doc.dump());
    };
    const std::string no_ts = with([](json& e) {
      if (e.value("cat", "") != "cpu_op") return false;
      e.erase("ts");
      return true;
    });
    CHECK(no_ts.find("$.traceEvents[") != std::string::npos);
    CHECK(no_ts.find(".ts: missing field") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("name", "") != "[memory]") return false;
            e["args"].erase("Bytes");
            return true;
          }).find("args.Bytes: missing field") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "kernel") return false;
            e["dur"] = "long";
            return true;
          }).find(".dur: expected a number") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "cpu_op") return false;
            e["args"]["Input Dims"] = 3;
            return true;
          }).find("args.Input Dims: expected an array") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "cpu_op") return false;
            e["args"]["Input Dims"] = json{{2, -3}};
            return true;
          }).find("negative extent") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "cpu_op") return false;
            e["dur"] = -5;
            return true;
          }).find("negative duration") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "kernel") return false;
            e["dur"] = 1e12;
            return true;
          }).find("implausible duration") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("name", "") != "[memory]") return false;
            e["args"]["Bytes"] = std::int64_t{1} << 62;
            return true;
          }).find("implausible allocation size") != std::string::npos);
    CHECK(with([](json& e) {
            if (e.value("cat", "") != "cpu_op") return false;
            e["ts"] = 1e300;
            return true;
          }).find("implausible time") != std::string::npos);
    CHECK(with([](json& e) {
            e.erase("ph");
            return true;
          }).find(".ph: missing field") != std::string::npos);
  }
  SECTION("absurd shapes") {
    json doc = synthetic_kineto();
    for (auto& e : doc.at("traceEvents")) {
      if (e.value("name", "") == "aten::conv2d") {
        e["args"]["Input Dims"][0] = json{1 << 20, 1 << 20, 1 << 20, 8};
        break;
      }
    }
    CHECK(import_error(doc.dump()).find("absurd") != std::string::npos);
  }
}

TEST_CASE("conv3d is imported as conv3d", "[importers][kineto][layers]") {
  const Workload w =
      import_json(cpu_trace({
                      {"aten::conv3d", json{{2, 3, 4, 8, 8}, {4, 3, 3, 3, 3}, {4}}, 1},
                      {"ConvolutionBackward0", json{{2, 4, 4, 8, 8}}, 1, true},
                  }))
          .workload;
  const auto& conv = op_named(w, "conv3d_1");
  CHECK(conv.layer == Layer::kConv3d);
  CHECK(conv.layer.rule().spatial_dims == 3);
  CHECK(tensor_names(w, conv.inputs) ==
        std::vector<std::string>{"input0", "conv3d_1.weight", "conv3d_1.bias"});
  CHECK(w.tensor(conv.inputs[1]).shape == std::vector<std::int64_t>{4, 3, 3, 3, 3});
  CHECK(w.tensor(conv.outputs[0]).shape == std::vector<std::int64_t>{2, 4, 4, 8, 8});
  const auto& bwd = op_named(w, "conv3d_1_bwd");
  CHECK(bwd.layer == Layer::kConv3d);
  CHECK(bwd.differentiates == conv.id);
}

TEST_CASE("conv1d is a generic op with a convolution's tensors (Note [conv1d])",
          "[importers][kineto][layers]") {
  const Workload w = import_json(cpu_trace({
                                     {"aten::conv1d", json{{2, 4, 16}, {6, 4, 3}, {6}}, 1},
                                     {"aten::relu", json{{2, 6, 14}}, 2},
                                     {"ReluBackward0", json{{2, 6, 14}}, 2, true},
                                     {"ConvolutionBackward0", json{{2, 6, 14}}, 1, true},
                                 }))
                         .workload;
  const auto& conv = op_named(w, "conv1d_1");
  CHECK(conv.layer.generic());
  CHECK(conv.layer.name() == "conv1d");
  // Its weight and bias are parameters, not inputs; its output has the weight's channels and the
  // length the next op reads.
  CHECK(tensor_names(w, conv.inputs) ==
        std::vector<std::string>{"input0", "conv1d_1.weight", "conv1d_1.bias"});
  CHECK(w.tensor(conv.inputs[1]).kind == TensorKind::kParameter);
  CHECK(w.tensor(conv.inputs[2]).kind == TensorKind::kParameter);
  CHECK(w.tensor(conv.outputs[0]).shape == std::vector<std::int64_t>{2, 6, 14});
  CHECK(w.tensor(op_named(w, "relu_1").inputs[0]).name == "conv1d_1.out");
  // Its backward reads the output's gradient, x and the weight, as a convolution's does, and
  // writes the gradients of the weight and bias.
  const auto& bwd = op_named(w, "conv1d_1_bwd");
  CHECK(bwd.layer.name() == "conv1d");
  CHECK(tensor_names(w, bwd.inputs) ==
        std::vector<std::string>{"grad.conv1d_1.out", "input0", "conv1d_1.weight"});
  CHECK(tensor_names(w, bwd.outputs) ==
        std::vector<std::string>{"grad.conv1d_1.weight", "grad.conv1d_1.bias"});
}

TEST_CASE("forward ops take the aten table's layer, or stay generic under their aten name",
          "[importers][kineto][layers]") {
  const std::vector<Event> events = {
      {"aten::adaptive_avg_pool2d", json{{2, 4, 8, 8}, json::array()}, 1},
      {"aten::addmm", json{{10}, {2, 4}, {4, 10}, json::array(), json::array()}, 2},
      {"aten::gelu", json{{2, 10}, json::array()}, 3},
      {"aten::hardtanh_", json{{2, 10}, json::array(), json::array()}, 4},
      {"aten::relu6", json{{2, 10}}, 5},
      {"aten::mm", json{{2, 10}, {10, 10}}, 6},
      {"aten::layer_norm", json{{2, 10}, json::array(), {10}, {10}}, 7},
      {"aten::cross_entropy_loss", json{{2, 10}, {2}}, 8},
  };
  const Workload w = import_json(cpu_trace(events)).workload;
  std::vector<std::string> forward;
  for (const auto& op : w.ops) {
    if (op.phase == Phase::kForward) forward.push_back(op.layer.str());
  }
  // hardtanh is relu6 only between 0 and 6, and the profiler records no bounds.
  CHECK(forward == std::vector<std::string>{"adaptive_avg_pool", "linear", "gelu", "hardtanh",
                                            "relu6", "mm", "layer_norm", "softmax_cross_entropy"});
  REQUIRE(forward.size() == events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    CAPTURE(events[i].name);
    std::vector<memplan::sim::AtenArgument> arguments(events[i].dims.size());
    const Layer table = memplan::sim::aten_layer(events[i].name, arguments);
    CHECK(w.ops[i].layer.generic() == (table == Layer::kGeneric));
    if (table != Layer::kGeneric) CHECK(w.ops[i].layer == table);
  }
}

TEST_CASE("events nested as deep as the trace has them are no crash",
          "[importers][kineto][bad_input]") {
  // Found by scripts/fuzz-cli: 300,000 identical events inside one ProfilerStep nest each inside
  // the one before, and the walk over them recursed once per level (SIGSEGV).
  std::string text =
      R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", )"
      R"("pid": 1, "tid": 1, "ts": 0, "dur": 10})";
  for (int i = 0; i < 300000; ++i)
    text += R"(, {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1})";
  text += "]}";
  CHECK(import_error(text).find("ProfilerStep#1 has no forward layer op") != std::string::npos);
}
