// A step recorded without shapes given its tensors by the allocations of the same run (Note
// [Sizes from allocations] in importers/kineto/allocation_sizes.cpp): from the trace's own
// addressed [memory] events, from a memory snapshot, and on the H200 traces with their shapes
// taken out, against the shaped import and the recorded peak.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "core/plan.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/snapshot_allocations.hpp"
#include "io/json_reader.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"
#include "tests/importers/kineto/synthetic_ranks.hpp"
#include "tests/support/run_command.hpp"

using memplan::importers::AllocationHistory;
using memplan::importers::ImportOptions;
using memplan::importers::MemorySnapshot;
using memplan::importers::SnapshotEvent;
namespace sim = memplan::sim;
using memplan::sim::TensorKind;
using memplan::sim::Workload;
using nlohmann::json;

namespace {

// The shapes a profiler records with record_shapes=True, taken out of every event.
void strip_shapes(json& doc) {
  for (json& e : doc["traceEvents"]) {
    if (!e.contains("args")) continue;
    for (const char* key :
         {"Input Dims", "Input dims", "Input type", "Input Strides", "Concrete Inputs"})
      e["args"].erase(key);
  }
}

// The start (us) of the `k`-th (from 0) complete event whose name ends with `name`.
double start_of(const json& doc, const std::string& name, int k = 0) {
  for (const json& e : doc["traceEvents"]) {
    const auto& n = e.value("name", std::string());
    if (e.value("ph", "") == "X" && n.size() >= name.size() &&
        n.compare(n.size() - name.size(), name.size(), name) == 0 && k-- == 0)
      return e["ts"].get<double>();
  }
  FAIL("no event " << name);
  return 0;
}

struct Alloc {
  double ts_us;
  std::int64_t addr;
  std::int64_t bytes;  // negative: a free
};

// The op of the workload named `name`.
const memplan::sim::Op& op_named(const Workload& w, const std::string& name) {
  const auto it = std::find_if(w.ops.begin(), w.ops.end(),
                               [&](const memplan::sim::Op& o) { return o.name == name; });
  REQUIRE(it != w.ops.end());
  return *it;
}

// The tensors of `w` of `kind`.
std::vector<memplan::sim::Tensor> of_kind(const Workload& w, TensorKind kind) {
  std::vector<memplan::sim::Tensor> out;
  for (const auto& t : w.tensors)
    if (t.kind == kind) out.push_back(t);
  return out;
}

// The synthetic step's ops (tests/importers/kineto/synthetic_kineto.hpp) without shapes or memory
// events, and the allocations of the test, worked out against the ops' start times S(op):
//  a) S(conv2d)+1: 1000 B at 0xa, freed at S(last ConvolutionBackward0)+1: an activation of the
//     first conv op, read last by the last backward op that runs then;
//  b) inside the first relu_: 512 B at 0xb (+1), 1024 B at 0xc (+2), both freed (+3, +4), then
//     2048 B at 0xb (+5) freed (+6): scratch, the op's workspace the most held at once, 2048 B;
//  c) S(linear)+1: 2000 B at 0xd freed, allocated before the trace: an input the linear op reads;
//  d) S(AddmmBackward0)+1: 3000 B at 0xe, never freed: a gradient, read by the step's last op;
//  e) ts 990, before the step (1000): 4000 B at 0xf, never freed: held throughout.
// Live bytes: at the step's start the 10,000 B held before the trace (the first event's Total
// Allocated, 13,000, less its own 1000 and the 2000 of c), 2000 (c) and 4000 (e): 16,000. Then
// +1000 (a) 17,000; in relu_ 17,512, 18,536, 18,024, 17,000, 19,048, 17,000; -2000 (c) 15,000;
// +3000 (d) 18,000; -1000 (a) 17,000. The peak: 19,048 B in the first relu_.
std::vector<Alloc> test_allocations(const json& doc) {
  const double conv = start_of(doc, "aten::conv2d");
  const double relu = start_of(doc, "aten::relu_");
  return {
      {990, 0xf, 4000},
      {conv + 1, 0xa, 1000},
      {relu + 1, 0xb, 512},
      {relu + 2, 0xc, 1024},
      {relu + 3, 0xb, -512},
      {relu + 4, 0xc, -1024},
      {relu + 5, 0xb, 2048},
      {relu + 6, 0xb, -2048},
      {start_of(doc, "aten::linear") + 1, 0xd, -2000},
      {start_of(doc, "AddmmBackward0") + 1, 0xe, 3000},
      {start_of(doc, "ConvolutionBackward0", 1) + 1, 0xa, -1000},
  };
}

json shapeless_step() {
  memplan::test::SyntheticOptions o;
  o.memory = false;
  json doc = memplan::test::synthetic_kineto(o);
  strip_shapes(doc);
  return doc;
}

void check_sized_step(const Workload& w, const memplan::importers::ImportReport& r) {
  CHECK(r.time_only);
  REQUIRE(r.allocations_peak_bytes);
  CHECK(*r.allocations_peak_bytes == 19048);
  CHECK(memplan::sim::incore_peak(w).bytes == 19048);
  for (const auto& t : w.tensors) CHECK(t.lifetime_only);
  // a): the first conv's output, read by the last backward op that started before its free.
  const auto acts = of_kind(w, TensorKind::kActivation);
  REQUIRE(acts.size() == 1);
  CHECK(acts[0].bytes == 1000);
  CHECK(w.op(acts[0].producer).name == w.ops.front().name);
  std::vector<std::string> readers;
  for (const auto& o : w.ops)
    if (std::count(o.inputs.begin(), o.inputs.end(), acts[0].id) > 0) readers.push_back(o.name);
  REQUIRE(readers.size() == 1);
  CHECK(op_named(w, readers[0]).phase == memplan::sim::Phase::kBackward);
  // b): the first relu_'s workspace; every other op has none.
  const auto relu = std::find_if(w.ops.begin(), w.ops.end(), [](const memplan::sim::Op& o) {
    return o.name.find("relu") != std::string::npos;
  });
  REQUIRE(relu != w.ops.end());
  CHECK(relu->workspace_bytes == 2048);
  for (const auto& o : w.ops)
    if (o.id != relu->id) CHECK(o.workspace_bytes == 0);
  // c) an input, d) a gradient read by the last op.
  const auto inputs = of_kind(w, TensorKind::kInput);
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].bytes == 2000);
  const auto grads = of_kind(w, TensorKind::kGradient);
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].bytes == 3000);
  const auto& last = w.ops.back();
  CHECK(std::count(last.inputs.begin(), last.inputs.end(), grads[0].id) == 1);
  // Nothing for a plan to move.
  CHECK(memplan::sim::find_feature_maps(w).empty());
  for (TensorKind k : {TensorKind::kParameter, TensorKind::kInput, TensorKind::kGradient})
    CHECK(memplan::sim::host_placeable(w, k).empty());
}

}  // namespace

TEST_CASE("a step without shapes takes its tensors from the trace's own [memory] events",
          "[importers][kineto][allocations]") {
  json doc = shapeless_step();
  double total = 13000;  // Total Allocated after each event: 10,000 + 2000 + 1000 at the first
  bool first = true;
  for (const Alloc& a : test_allocations(doc)) {
    if (a.ts_us < 1000) continue;  // e) comes from the snapshot test only: here, held before
    if (!first) total += static_cast<double>(a.bytes);
    first = false;
    doc["traceEvents"].push_back({{"ph", "i"},
                                  {"s", "t"},
                                  {"name", "[memory]"},
                                  {"pid", 1},
                                  {"tid", 1},
                                  {"ts", a.ts_us},
                                  {"args",
                                   {{"Device Type", 1},
                                    {"Device Id", 0},
                                    {"Addr", a.addr},
                                    {"Bytes", a.bytes},
                                    {"Total Allocated", total + 4000},
                                    {"Total Reserved", 1 << 21}}}});
  }
  // Without e) as an allocation, its 4000 B are part of what was held before the trace.
  const auto result = memplan::test::import_json(doc);
  CHECK(result.report.sizes_from == "the trace's [memory] events");
  check_sized_step(result.workload, result.report);
  const auto held = of_kind(result.workload, TensorKind::kParameter);
  REQUIRE(held.size() == 1);
  CHECK(held[0].bytes == 14000);
}

TEST_CASE("a step without shapes takes its tensors from a memory snapshot of the same run",
          "[importers][kineto][allocations]") {
  const json doc = shapeless_step();
  // The snapshot's clock is the Unix time: the trace's time 0 is at `base` ns.
  const std::int64_t base = 1'790'857'026'000'000'000;
  json with_base = doc;
  with_base["baseTimeNanoseconds"] = base;
  const auto trace = memplan::importers::parse_kineto_trace(with_base.dump(), "synthetic.json");
  REQUIRE(trace.base_time_ns == base);
  MemorySnapshot snapshot;
  snapshot.device_traces.resize(1);
  for (const Alloc& a : test_allocations(doc)) {
    SnapshotEvent e;
    e.action = a.bytes > 0 ? "alloc" : "free_requested";
    e.address = a.addr;
    e.size = a.bytes > 0 ? a.bytes : -a.bytes;
    e.time_us = static_cast<double>(base / 1000) + a.ts_us;
    snapshot.device_traces[0].push_back(e);
    e.action = "free_completed";  // not the program's free: no effect
    if (a.bytes < 0) snapshot.device_traces[0].push_back(e);
  }
  // The dump: the blocks held since before the first event (10,000 B), e) and d) allocated.
  memplan::importers::SnapshotSegment segment;
  segment.blocks = {{0x100, 10240, 10000, "active_allocated"},
                    {0xf, 4096, 4000, "active_allocated"},
                    {0xe, 3072, 3000, "active_allocated"},
                    {0x9000, 4096, 0, "inactive"}};
  snapshot.segments.push_back(segment);
  ImportOptions options;
  options.allocations =
      memplan::importers::snapshot_allocation_history(snapshot, std::nullopt, base, "s.pickle");
  const auto result = memplan::importers::import_kineto(trace, options, "synthetic.json");
  CHECK(result.report.sizes_from == "snapshot s.pickle (device 0)");
  check_sized_step(result.workload, result.report);
  // Held throughout: the block from before the first event and e), each its own tensor.
  auto held = of_kind(result.workload, TensorKind::kParameter);
  REQUIRE(held.size() == 2);
  std::sort(held.begin(), held.end(),
            [](const auto& x, const auto& y) { return x.bytes < y.bytes; });
  CHECK(held[0].bytes == 4000);
  CHECK(held[1].bytes == 10000);

  // A snapshot of another run: no allocation in the step.
  for (auto& e : snapshot.device_traces[0]) *e.time_us += 3600e6;
  snapshot.segments.clear();
  options.allocations =
      memplan::importers::snapshot_allocation_history(snapshot, std::nullopt, base, "s.pickle");
  CHECK_THROWS_WITH(memplan::importers::import_kineto(trace, options, "synthetic.json"),
                    Catch::Contains("no allocation of snapshot s.pickle (device 0) in its time "
                                    "span: not the same run"));
  // A step with shapes keeps them and refuses the snapshot.
  const auto shaped = memplan::importers::parse_kineto_trace(
      memplan::test::synthetic_kineto().dump(), "synthetic.json");
  CHECK_THROWS_WITH(memplan::importers::import_kineto(shaped, options, "synthetic.json"),
                    Catch::Contains("has recorded shapes: its sizes come from them"));
  // Two devices with events and none named; an allocation without time_us.
  snapshot.device_traces.push_back(snapshot.device_traces[0]);
  CHECK_THROWS_WITH(
      memplan::importers::snapshot_allocation_history(snapshot, std::nullopt, base, "s.pickle"),
      Catch::Contains("devices 0, 1 have allocator events: name the step's device"));
  snapshot.device_traces[1][0].time_us.reset();
  CHECK_THROWS_WITH(memplan::importers::snapshot_allocation_history(snapshot, 1, base, "s.pickle"),
                    Catch::Contains("device_traces[1][0]: no time_us"));
}

TEST_CASE("the H200 steps without their shapes: the in-core peak is the recorded one",
          "[importers][kineto][allocations]") {
  // The shapes taken out of gpt_checkpointed (which the shaped import does not see as
  // checkpointed: 8,570 MiB in-core against 5,838 MiB recorded) and of gpt2. With the trace's
  // [memory] events, or with the run's snapshot instead: the replay's peak is the allocations'
  // own, never below it (Note [Sizes from allocations]: only the order inside an op differs), and
  // within 0.01% (4 B and 32,772 B when this was written).
  for (const std::string job : {"gpt_checkpointed", "gpt2"}) {
    json doc = memplan::sim::read_json(
        memplan::test::source_path("traces/kineto-h200/" + job + ".pt.trace.json.gz"));
    strip_shapes(doc);
    const auto own = memplan::importers::parse_kineto_trace(doc.dump(), job);
    const auto from_trace = memplan::importers::import_kineto(own, {}, job);
    auto& events = doc["traceEvents"];
    events.erase(std::remove_if(events.begin(), events.end(),
                                [](const json& e) { return e.value("name", "") == "[memory]"; }),
                 events.end());
    const auto bare = memplan::importers::parse_kineto_trace(doc.dump(), job);
    ImportOptions options;
    options.allocations = memplan::importers::snapshot_allocation_history(
        memplan::importers::read_memory_snapshot(
            memplan::test::source_path("traces/kineto-h200/" + job + ".snapshot.pickle.gz")),
        std::nullopt, *bare.base_time_ns, job);
    const auto from_snapshot = memplan::importers::import_kineto(bare, options, job);
    for (const auto* r : {&from_trace, &from_snapshot}) {
      CAPTURE(job, r->report.sizes_from);
      REQUIRE(r->report.allocations_peak_bytes);
      const auto recorded = *r->report.allocations_peak_bytes;
      const auto peak = memplan::sim::incore_peak(r->workload).bytes;
      CHECK(peak >= recorded);
      CHECK(peak - recorded <= recorded / 10000);
    }
    // The snapshot gives the requested bytes, the trace the allocator's blocks: within 0.5%.
    const auto a = *from_trace.report.allocations_peak_bytes;
    const auto b = *from_snapshot.report.allocations_peak_bytes;
    CHECK(std::max(a, b) - std::min(a, b) <= a / 200);
  }
}

TEST_CASE("each rank of a job without shapes takes its sizes from its own snapshot",
          "[importers][kineto][allocations]") {
  // Two ranks of the synthetic DDP step, shapes and [memory] events taken out; rank r's history
  // holds one allocation made in its step's first op and never freed, of 1000 * (r + 1) bytes.
  std::vector<memplan::importers::KinetoTrace> traces;
  std::vector<AllocationHistory> histories;
  for (int r = 0; r < 2; ++r) {
    memplan::test::SyntheticRank options;
    options.rank = r;
    options.memory = false;
    json doc = memplan::test::synthetic_rank(options);
    strip_shapes(doc);
    traces.push_back(memplan::importers::parse_kineto_trace(doc.dump(), "rank.json"));
    AllocationHistory h;
    h.source = fmt::format("snapshot of rank {}", r);
    h.allocations.push_back(
        {1, 0x10, 1000 * (r + 1),
         static_cast<sim::Nanoseconds>(start_of(doc, "aten::conv2d") * 1000) + 1, std::nullopt,
         ""});
    histories.push_back(h);
  }
  const auto job = memplan::importers::import_kineto_job(traces, {}, histories);
  REQUIRE(job.job.ranks.size() == 2);
  for (int r = 0; r < 2; ++r) {
    const auto& w = job.job.ranks[static_cast<std::size_t>(r)];
    CHECK(job.reports[static_cast<std::size_t>(r)].sizes_from ==
          fmt::format("snapshot of rank {}", r));
    REQUIRE(w.tensors.size() == 1);
    CHECK(w.tensors[0].bytes == 1000 * (r + 1));
  }
  histories.pop_back();
  CHECK_THROWS_WITH(memplan::importers::import_kineto_job(traces, {}, histories),
                    Catch::Contains("1 snapshots for 2 ranks: give one per rank, in rank order"));
}
