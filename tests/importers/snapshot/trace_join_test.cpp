// A snapshot and a profiler trace of the same run joined by time
// (importers/snapshot/trace_join.hpp), checked against the trace's own account: PyTorch's profiler
// (profile_memory) records each device allocation as a `[memory]` instant event on the thread that
// made it, so the op it belongs to is the innermost CPU op open on that thread at that instant. The
// join, which has only the snapshot's times, must name the same op for all but a few.
#include <filesystem>
#include <map>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/trace_join.hpp"
#include "io/json_reader.hpp"

using namespace memplan::importers;

namespace {

const std::filesystem::path kDir = std::filesystem::path(MEMPLAN_SOURCE_DIR) / "traces/kineto-h200";

// The profiler's own attribution: per op name, the device allocations ([memory] events with
// positive bytes on a CUDA device) made inside it on their thread.
std::map<std::string, std::size_t> profiler_attribution(const std::filesystem::path& trace) {
  const nlohmann::json doc = memplan::sim::read_json(trace);
  struct CpuOp {
    nlohmann::json tid;
    double start, end;
    std::string name;
  };
  std::vector<CpuOp> ops;  // read out of the JSON once: the search below is ops x allocations
  std::map<std::string, std::size_t> counts;
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.value("ph", "") == "X" && e.value("cat", "") == "cpu_op") {
      const double start = e.at("ts").get<double>();
      ops.push_back({e.at("tid"), start, start + e.at("dur").get<double>(), e.at("name")});
    }
  }
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.value("name", "") != "[memory]") continue;
    const nlohmann::json& args = e.at("args");
    if (args.value("Device Type", 0) != 1 || args.value("Bytes", std::int64_t{0}) <= 0) continue;
    const double ts = e.at("ts").get<double>();
    const nlohmann::json& tid = e.at("tid");
    const CpuOp* inner = nullptr;
    for (const CpuOp& op : ops) {
      if (op.tid != tid || ts < op.start || ts >= op.end) continue;
      if (inner == nullptr || op.start > inner->start) inner = &op;
    }
    ++counts[inner == nullptr ? std::string("(none)") : inner->name];
  }
  return counts;
}

}  // namespace

TEST_CASE(
    "a snapshot joined with its run's trace names the op the profiler names for each "
    "allocation",
    "[importers][snapshot][real]") {
  for (const char* name : {"gpt2", "resnet50"}) {
    CAPTURE(name);
    const MemorySnapshot snapshot =
        read_memory_snapshot(kDir / (std::string(name) + ".snapshot.pickle.gz"));
    const auto trace = kDir / (std::string(name) + ".pt.trace.json.gz");
    const std::vector<SnapshotTraceJoin> joins = join_with_trace(snapshot, trace);
    REQUIRE(joins.size() == 1);
    const SnapshotTraceJoin& j = joins[0];
    const std::map<std::string, std::size_t> expected = profiler_attribution(trace);
    std::size_t profiled = 0;
    for (const auto& [op, n] : expected) profiled += n;
    // Every allocation the profiler saw is one of the snapshot's in the trace's span, and each
    // goes to the same op.
    CHECK(j.in_span == profiled);
    CHECK(j.attributed == profiled);
    std::map<std::string, std::size_t> joined;
    for (const OpAllocations& a : j.by_op) joined[a.op] = a.allocations;
    // The same op for every one, though c10's clock is about a microsecond off the profiler's.
    CHECK(joined == expected);
    for (std::size_t i = 1; i < j.by_op.size(); ++i)
      CHECK(j.by_op[i - 1].bytes >= j.by_op[i].bytes);
  }
}

TEST_CASE("a snapshot and a trace of different runs are refused", "[importers][snapshot]") {
  const MemorySnapshot snapshot = read_memory_snapshot(kDir / "gpt2.snapshot.pickle.gz");
  CHECK_THROWS_WITH(join_with_trace(snapshot, kDir / "resnet50.pt.trace.json.gz"),
                    Catch::Contains("do not overlap in time: not the same run"));
  MemorySnapshot untimed = snapshot;
  for (SnapshotEvent& e : untimed.device_traces[0]) e.time_us.reset();
  CHECK_THROWS_WITH(join_with_trace(untimed, kDir / "gpt2.pt.trace.json.gz"),
                    Catch::Contains("carry no time_us"));
}
