// The importer on small hand-made traces in both formats: dataflow, device times, step choice,
// CPU-only traces and every kind of bad input.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

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
using memplan::sim::Phase;
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
                                 "relu", "avg_pool2d", "linear", "softmax_cross_entropy"});
  CHECK(layers(w, Phase::kBackward) ==
        std::vector<std::string>{"softmax_cross_entropy", "linear", "avg_pool2d", "relu", "add",
                                 "batch_norm", "conv2d", "relu", "batch_norm", "conv2d"});
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

TEST_CASE("several steps: the first complete one by default, or the one asked for",
          "[importers][kineto]") {
  SyntheticOptions o;
  o.steps = 3;
  const json doc = synthetic_kineto(o);
  CHECK(import_json(doc).workload.provenance.step == 1);
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

  // Drop the kernels of step 1: it is incomplete, so step 2 is taken.
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
    CHECK(import_error(good.substr(0, good.size() / 2)).find("not complete JSON") !=
          std::string::npos);
  }
  SECTION("a number too large for JSON (found by the fuzzer)") {
    CHECK(import_error(R"({"traceEvents": [{"ph": "X", "ts": 1400e01475}]})")
              .find("unreadable JSON") != std::string::npos);
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
