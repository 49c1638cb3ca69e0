// The importer's host side (trace format v2), step choice, copies and the rules that come from
// PyTorch's and CUDA's semantics, on synthetic_kineto() with events added where a rule needs them.
//
// The synthetic step (tests/importers/kineto/synthetic_kineto.cpp), times in us: the step starts at
// 1000; its 26 top-level events start at 1005 + 50 j (j = 0..25), last 40 us, and launch their
// kernels at start + 25 (+4 per further kernel), each launch call taking 3 us. The ops and the
// event j each comes from:
//   op 0 conv (j 0), op 1 bn (2), op 2 relu (3), op 3 conv (4), op 4 bn (5), op 5 add (6),
//   op 6 relu (7), op 7 avg-pool (8), op 8 linear (10), op 9 cross-entropy (11),
//   op 10..13 backward of CE, linear, pool, relu (13, 14, 17, 18), op 14 the add's backward (19,
//   launches nothing), op 15..19 (20..24), op 20 SGD (25, three kernels at 2280, 2284, 2288).
// j 1 (a scalar add), 9 (flatten), 12 (zero_grad), 15 (AccumulateGrad), 16 (ViewBackward) are
// folded. The last kernel ends at 2309, so the step ends at 2309 + 5 = 2314.
#include <algorithm>
#include <numeric>
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "importers/kineto/host_side.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "io/input_stream.hpp"
#include "io/trace_io.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"

using memplan::importers::ImportOptions;
using memplan::importers::parse_kineto_trace;
using memplan::sim::InputError;
using memplan::test::import_json;
using memplan::test::synthetic_kineto;
using memplan::test::SyntheticOptions;
using nlohmann::json;

namespace {

std::string error_of(const json& doc, const ImportOptions& options = {}) {
  try {
    (void)import_json(doc, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A runtime call on the main thread (pid 1, tid 1), with its GPU copy when `copy` is given.
void add_call(json& doc, const std::string& name, std::int64_t ts, std::int64_t dur,
              std::int64_t correlation, const std::string& copy = "", std::int64_t copy_ts = 0,
              std::int64_t copy_dur = 0, std::int64_t bytes = 0) {
  json& events = doc["traceEvents"];
  events.push_back({{"ph", "X"},
                    {"cat", "cuda_runtime"},
                    {"name", name},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", ts},
                    {"dur", dur},
                    {"args", {{"correlation", correlation}}}});
  if (copy.empty()) return;
  events.push_back({{"ph", "X"},
                    {"cat", "gpu_memcpy"},
                    {"name", copy},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", copy_ts},
                    {"dur", copy_dur},
                    {"args", {{"correlation", correlation}, {"stream", 7}, {"bytes", bytes}}}});
}

std::int64_t dispatch(const memplan::sim::Workload& w, std::size_t op) {
  REQUIRE(w.ops.at(op).host.has_value());
  return w.ops[op].host->dispatch_ns;
}

}  // namespace

TEST_CASE("host side: each op's dispatch is the time from the previous launch to its own",
          "[importers][kineto][host]") {
  const auto r = import_json(synthetic_kineto());
  const auto& w = r.workload;
  REQUIRE(w.ops.size() == 21);
  CHECK(dispatch(w, 0) == 30'000);    // step start 1000 -> conv's launch 1030
  CHECK(dispatch(w, 1) == 100'000);   // 1030 -> bn's launch 1130 (the scalar add between)
  CHECK(dispatch(w, 2) == 50'000);    // 1130 -> 1180
  CHECK(dispatch(w, 12) == 150'000);  // 1730 -> pool backward 1880 (two folded events between)
  CHECK(dispatch(w, 14) == 25'000);   // 1930 -> the add's backward launches nothing: its start 1955
  CHECK(dispatch(w, 15) == 75'000);   // 1955 -> 2030
  CHECK(dispatch(w, 20) == 50'000);   // 2230 -> SGD's first launch 2280
  // No blocking call: nothing synchronizes, and the dispatches and the tail (2280 -> 2314) add up
  // to the recorded step (1314 us).
  CHECK(std::none_of(w.ops.begin(), w.ops.end(),
                     [](const auto& op) { return op.host->synchronizes; }));
  CHECK(w.host_tail_ns == 34'000);
  const std::int64_t host =
      std::accumulate(w.ops.begin(), w.ops.end(), w.host_tail_ns,
                      [](std::int64_t s, const auto& op) { return s + op.host->dispatch_ns; });
  CHECK(host == 1'314'000);
  CHECK(w.launch_ns == 3'000);  // every launch call takes 3 us
  CHECK(r.report.streams == 1);
}

TEST_CASE("host side: a synchronize marks the op launched before it, its wait leaves the dispatch",
          "[importers][kineto][host]") {
  json doc = synthetic_kineto();
  // After cross-entropy's launch (1580), a 20 us cudaStreamSynchronize at 1590.
  add_call(doc, "cudaStreamSynchronize", 1590, 20, 9001);
  const auto w = import_json(doc).workload;
  CHECK(w.ops[9].host->synchronizes);
  CHECK_FALSE(w.ops[8].host->synchronizes);
  CHECK_FALSE(w.ops[10].host->synchronizes);
  // The host works from the launch at 1580 to the call at 1590, then waits.
  CHECK(w.ops[9].host->sync_after_ns == 10'000);
  CHECK(dispatch(w, 10) == 70'000);  // 1580 -> 1680 less the 10 us before the call and its 20
}

TEST_CASE("host side: CUDA's blocking copies synchronize, pinned async ones do not",
          "[importers][kineto][host]") {
  json doc = synthetic_kineto();
  // .item(): a device-to-pageable cudaMemcpyAsync, which returns when the copy is done. The call
  // lasts 30 us of which the copy itself runs 4: the host waited 26 us for the device.
  add_call(doc, "cudaMemcpyAsync", 1590, 30, 9002, "Memcpy DtoH (Device -> Pageable)", 1615, 4, 4);
  // A pinned host-to-device copy during the pool (launch 1430): asynchronous, no wait.
  add_call(doc, "cudaMemcpyAsync", 1436, 3, 9003, "Memcpy HtoD (Pinned -> Device)", 1440, 1000,
           8 << 20);
  const auto r = import_json(doc);
  const auto& w = r.workload;
  CHECK(w.ops[9].host->synchronizes);
  CHECK(w.ops[9].host->sync_after_ns == 10'000);  // 1580 -> the call at 1590
  CHECK(dispatch(w, 10) == 64'000);               // 100 us less those 10 and the 26 us wait
  CHECK_FALSE(w.ops[7].host->synchronizes);
  CHECK(dispatch(w, 8) == 100'000);
  CHECK(r.report.blocking_calls == 1);
  CHECK(r.report.copies == 2);
  CHECK(r.report.pageable_copies == 1);
  CHECK(r.report.h2d_bytes == 8 << 20);
  CHECK(r.report.d2h_bytes == 4);
  // The link: the 8 MiB pinned copy in 1000 us measures 8388608 B / 1 ms = 8.388608 GB/s; the
  // 4-byte copy is too small to measure device-to-host.
  REQUIRE(w.device.link.h2d_bytes_per_s.has_value());
  CHECK(*w.device.link.h2d_bytes_per_s == Approx(8.388608e9));
  CHECK_FALSE(w.device.link.d2h_bytes_per_s.has_value());
  CHECK(w.provenance.note.find("H2D 8.39 GB/s (1 pinned copies)") != std::string::npos);
}

TEST_CASE("measured link: pinned copies first, pageable ones when there is no pinned one",
          "[importers][host]") {
  using memplan::importers::CopyDirection;
  using memplan::importers::measure_link;
  using memplan::importers::RecordedCopy;
  const std::int64_t mib = 1 << 20;
  // H2D: 2 pinned copies, 4 + 2 MiB in 1 ms total: 6 MiB/ms; the pageable one is ignored.
  // D2H: only pageable ones; the 1 KiB copy is too small, the 3 MiB one in 0.5 ms measures.
  const std::vector<RecordedCopy> copies{
      {CopyDirection::kHostToDevice, false, 4 * mib, 600'000, 7},
      {CopyDirection::kHostToDevice, false, 2 * mib, 400'000, 7},
      {CopyDirection::kHostToDevice, true, 64 * mib, 100'000, 7},
      {CopyDirection::kDeviceToHost, true, 1024, 10'000, 7},
      {CopyDirection::kDeviceToHost, true, 3 * mib, 500'000, 7},
  };
  const auto link = measure_link(copies);
  CHECK(*link.link.h2d_bytes_per_s == Approx(6.0 * mib / 1e-3));
  CHECK(link.h2d_copies == 2);
  CHECK_FALSE(link.h2d_pageable);
  CHECK(*link.link.d2h_bytes_per_s == Approx(3.0 * mib / 0.5e-3));
  CHECK(link.d2h_pageable);
}

TEST_CASE("trace format v2: host fields round-trip, a workload without them stays v1",
          "[importers][trace_io][host]") {
  auto w = import_json(synthetic_kineto()).workload;
  CHECK(memplan::sim::trace_format_version(w) == 2);
  const std::string text = memplan::sim::write_trace(w);
  CHECK(text.find("\"version\": 2") != std::string::npos);
  CHECK(memplan::sim::parse_trace(text, "v2.json") == w);
  for (auto& op : w.ops) op.host.reset();
  w.launch_ns.reset();
  w.host_tail_ns = 0;
  const std::string v1 = memplan::sim::write_trace(w);
  CHECK(v1.find("\"version\": 1") != std::string::npos);
  CHECK(memplan::sim::parse_trace(v1, "v1.json") == w);
  // A v1 file may not carry v2 fields.
  std::string bad = text;
  bad.replace(bad.find("\"version\": 2"), 12, "\"version\": 1");
  CHECK_THROWS_WITH(memplan::sim::parse_trace(bad, "bad.json"), Catch::Contains("unknown field"));
}

TEST_CASE("an op reading one tensor twice (x * x) has one gradient for it, no self-cycle",
          "[importers][kineto]") {
  json doc = synthetic_kineto();
  json& events = doc["traceEvents"];
  // aten::mul(relu_2.out, relu_2.out) in the gap after the second ReLU (1355..1395), and its
  // MulBackward0 on the autograd thread in the gap before the ReLU backward (1905).
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::mul"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 1397},
                    {"dur", 6},
                    {"args",
                     {{"Input Dims", {{2, 4, 8, 8}, {2, 4, 8, 8}}},
                      {"Input type", {"float", "float"}},
                      {"Sequence number", 30}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "autograd::engine::evaluate_function: MulBackward0"},
                    {"pid", 1},
                    {"tid", 2},
                    {"ts", 1897},
                    {"dur", 6},
                    {"args", {{"Input Dims", {{2, 4, 8, 8}}}, {"Sequence number", 30}}}});
  const auto w = import_json(doc).workload;  // validated: no cycle
  const auto it = std::find_if(w.ops.begin(), w.ops.end(),
                               [](const auto& op) { return op.name == "mul_1_bwd"; });
  REQUIRE(it != w.ops.end());
  REQUIRE(it->outputs.size() == 1);
  CHECK(w.tensor(it->outputs[0]).name == "grad.relu_2.out");
  for (auto t : it->inputs) CHECK(w.tensor(t).producer != it->id);
}

TEST_CASE("step choice: an annotation, a window or the whole trace", "[importers][kineto]") {
  SyntheticOptions two;
  two.steps = 2;
  const json doc = synthetic_kineto(two);
  ImportOptions step2;
  step2.step = 2;
  const auto by_number = import_json(doc, step2);
  ImportOptions annotation;
  annotation.step_annotation = "ProfilerStep#2";
  const auto by_annotation = import_json(doc, annotation);
  CHECK(by_annotation.report.step.label == "annotation 'ProfilerStep#2'");
  CHECK(by_annotation.workload.ops.size() == by_number.workload.ops.size());
  CHECK(by_annotation.report.op_time_ns == by_number.report.op_time_ns);
  CHECK_FALSE(by_annotation.workload.provenance.step.has_value());
  // Step 1 spans 1000..2314 us and the first event is at 1000: a window of 0..1314 us is step 1.
  ImportOptions window;
  window.window = std::pair<std::int64_t, std::int64_t>{0, 1'314'000};
  const auto by_window = import_json(doc, window);
  CHECK(by_window.workload.ops.size() == 21);
  CHECK(by_window.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
  ImportOptions whole;
  whole.whole_trace = true;
  const auto all = import_json(synthetic_kineto(), whole);
  CHECK(all.workload.ops.size() == 21);
  CHECK(all.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
  // The whole of a trace of two steps, or a window over both, is not one step (#40 item 5: the
  // second step's device time was folded into the first's ops).
  CHECK(error_of(doc, whole) ==
        "synthetic.json: --whole takes one training step, and the whole trace holds 2 "
        "(ProfilerStep#1, #2): import one with --step N (without it, the median complete step)");
  ImportOptions both;
  both.window = std::pair<std::int64_t, std::int64_t>{0, 3'000'000};
  CHECK_THAT(error_of(doc, both), Catch::Contains("--window takes one training step, and window "
                                                  "0.000:3.000 ms holds 2"));
  CHECK(error_of(doc, [] {
          ImportOptions o;
          o.step_annotation = "train_step";
          return o;
        }()) == "synthetic.json: no event named 'train_step' (--step-annotation)");
  // Without ProfilerStep#N the error says what else there is.
  json no_steps = synthetic_kineto();
  for (auto& e : no_steps["traceEvents"]) {
    if (e.value("name", "").rfind("ProfilerStep#", 0) == 0) e["name"] = "train_step";
  }
  CHECK_THAT(error_of(no_steps), Catch::Contains("--step-annotation NAME"));
  ImportOptions named;
  named.step_annotation = "train_step";
  CHECK(import_json(no_steps, named).workload.ops.size() == 21);
}

TEST_CASE("the legacy format of a PyTorch built without Kineto: one line, what to do",
          "[importers][kineto][bad_input]") {
  // tests/importers/legacy_autograd_profiler.json: written by Debian's torch 1.13 (no Kineto)
  // with torch.autograd.profiler.profile(record_shapes=True) + export_chrome_trace.
  const std::string text =
      memplan::sim::read_file(MEMPLAN_SOURCE_DIR "/tests/importers/legacy_autograd_profiler.json");
  try {
    (void)parse_kineto_trace(text, "legacy.json");
    FAIL("accepted");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("legacy torch.autograd.profiler format") != std::string::npos);
    CHECK(what.find("torch.profiler.profile(") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("without recorded shapes the time side alone is imported, planning commands refuse",
          "[importers][kineto]") {
  // No [memory] events either: nothing gives sizes (kineto_allocation_sizes_test.cpp: with them).
  memplan::test::SyntheticOptions no_memory;
  no_memory.memory = false;
  json doc = synthetic_kineto(no_memory);
  for (auto& e : doc["traceEvents"]) {
    if (e.contains("args")) {
      e["args"].erase("Input Dims");
      e["args"].erase("Input type");
    }
  }
  const auto r = import_json(doc);
  const auto& w = r.workload;
  CHECK(r.report.time_only);
  CHECK(w.tensors.empty());
  // Every aten op of the forward pass is an op now (the scalar add and flatten too: 12 of them),
  // the 11 backward nodes that are not AccumulateGrad and have a forward op (ViewBackward's
  // flatten is one now), the optimizer step; the step's kernel time is all there.
  CHECK(r.report.forward_ops == 12);
  CHECK(r.report.update_ops == 1);
  CHECK(r.report.op_time_ns == memplan::test::synthetic_step_kernel_ns());
  CHECK(w.ops.front().host.has_value());
  CHECK_THROWS_WITH(
      memplan::sim::require_sizes(w, "t.json"),
      Catch::StartsWith("t.json: has no tensor sizes") && Catch::Contains("record_shapes=True"));
  CHECK(memplan::sim::parse_trace(memplan::sim::write_trace(w), "t.json") == w);
}

TEST_CASE("a foreach optimizer's tensor lists give the parameters to check the import against",
          "[importers][kineto]") {
  json doc = synthetic_kineto();
  // The SGD step (2255..2295 us on the main thread) also runs a foreach op over its parameter
  // list: conv1 [4,3,3,3], bn1 [4] [4], conv2 [4,4,3,3], bn2 [4] [4], linear [10,4] [10]; and a
  // list of scalar step counters, which is narrower.
  const json params = {{4, 3, 3, 3}, {4}, {4}, {4, 4, 3, 3}, {4}, {4}, {10, 4}, {10}};
  doc["traceEvents"].push_back({{"ph", "X"},
                                {"cat", "cpu_op"},
                                {"name", "aten::_foreach_add_"},
                                {"pid", 1},
                                {"tid", 1},
                                {"ts", 2262},
                                {"dur", 2},
                                {"args",
                                 {{"Input Dims", {params, params, json::array()}},
                                  {"Input type", {"TensorList", "TensorList", "Scalar"}}}}});
  doc["traceEvents"].push_back(
      {{"ph", "X"},
       {"cat", "cpu_op"},
       {"name", "aten::_foreach_add_"},
       {"pid", 1},
       {"tid", 1},
       {"ts", 2265},
       {"dur", 2},
       {"args", {{"Input Dims", {json::array({json::array(), json::array()}), json::array()}}}}});
  const auto r = import_json(doc);
  // 108 + 4 + 4 + 144 + 4 + 4 + 40 + 10 = 318 float32 elements = 1272 bytes, both ways.
  CHECK(r.report.trainable_parameters == 8);
  CHECK(r.report.trainable_parameter_bytes == 1272);
  REQUIRE(r.report.optimizer_shape_tensors.has_value());
  CHECK(*r.report.optimizer_shape_tensors == 8);
  CHECK(r.report.optimizer_shape_bytes == 1272);
  // Without the lists there is nothing to check against.
  CHECK_FALSE(import_json(synthetic_kineto()).report.optimizer_shape_tensors.has_value());
}
