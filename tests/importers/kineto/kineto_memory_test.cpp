// [memory] events with addresses (importers/kineto/memory_timeline.hpp), in the current Kineto
// format: instant events named "[memory]" whose args carry "Addr", "Bytes" (positive on allocation,
// negative on free), "Total Allocated", "Total Reserved", "Device Type" (1: CUDA) and "Device Id",
// as torch.profiler writes them with profile_memory=True. The expectations follow PyTorch's memory
// timeline: an allocation lives from its event until the next free at its address.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/memory_timeline.hpp"
#include "importers/kineto/recorded_step.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"

using memplan::importers::allocator_bytes;
using memplan::importers::pair_allocations;
using memplan::importers::parse_kineto_trace;
using nlohmann::json;

namespace {

json memory_event(double ts_us, std::int64_t addr, std::int64_t bytes, int device_type = 1,
                  std::int64_t total = 0) {
  json args = {{"Device Type", device_type},
               {"Device Id", device_type == 1 ? 0 : -1},
               {"Bytes", bytes},
               {"Total Allocated", total},
               {"Total Reserved", 0}};
  if (addr != 0) args["Addr"] = addr;
  return {{"ph", "i"}, {"s", "t"},    {"name", "[memory]"}, {"pid", 7},
          {"tid", 7},  {"ts", ts_us}, {"args", args}};
}

std::vector<memplan::importers::MemoryEvent> parse(const json& events) {
  return parse_kineto_trace(json{{"traceEvents", events}}.dump(), "m.json").memory_events;
}

}  // namespace

TEST_CASE("allocations pair with their frees by address, an address is reused after its free",
          "[importers][memory]") {
  // t=1 us: 512 B at 0x1000; t=2: 1024 B at 0x2000; t=3: 0x1000 freed; t=4: 0x1000 handed out
  // again, 2048 B (another allocation); t=5: 4096 B freed at 0x3000, never allocated in the trace
  // (before the profiler started). 0x2000 and the second 0x1000 are never freed.
  const auto events = parse(json::array(
      {memory_event(1, 0x1000, 512), memory_event(2, 0x2000, 1024), memory_event(3, 0x1000, -512),
       memory_event(4, 0x1000, 2048), memory_event(5, 0x3000, -4096),
       memory_event(6, 0x4000, 64, 0)}));  // a CPU allocation
  const auto a = pair_allocations(events, 1);
  REQUIRE(a);
  REQUIRE(a->size() == 4);
  CHECK((*a)[0].addr == 0x1000);
  CHECK((*a)[0].bytes == 512);
  CHECK((*a)[0].alloc_ns == 1000);
  CHECK((*a)[0].free_ns == 3000);
  CHECK((*a)[1].addr == 0x2000);
  CHECK_FALSE((*a)[1].free_ns);
  CHECK((*a)[2].addr == 0x1000);
  CHECK((*a)[2].bytes == 2048);
  CHECK((*a)[2].alloc_ns == 4000);
  CHECK_FALSE((*a)[2].free_ns);
  CHECK_FALSE((*a)[3].alloc_ns);  // before the trace
  CHECK((*a)[3].bytes == 4096);
  CHECK((*a)[3].free_ns == 5000);
  // The CPU's allocations are another device's.
  const auto cpu = pair_allocations(events, 0);
  REQUIRE(cpu);
  REQUIRE(cpu->size() == 1);
  CHECK(cpu->front().bytes == 64);
}

TEST_CASE("memory events without addresses (the 2021 format) give no allocations",
          "[importers][memory]") {
  const auto events = parse(json::array({memory_event(1, 0, 512), memory_event(2, 0, -512)}));
  CHECK_FALSE(pair_allocations(events, 1));
}

TEST_CASE("an address allocated again, or freed as another size, was freed with no event",
          "[importers][memory]") {
  // Note [Frees the profiler does not see]: the profiler records a free only on a thread it
  // watches. t=1 us: 512 B at 0x1000; t=2: 0x1000 handed out again (256 B): the first was freed
  // unseen by then; t=3: 0x1000 freed as 1024 B: the 256 B were freed unseen and 1024 B
  // allocated unseen, before the trace or during it.
  const auto events = parse(json::array(
      {memory_event(1, 0x1000, 512), memory_event(2, 0x1000, 256), memory_event(3, 0x1000, -1024),
       memory_event(4, 0x1000, 64), memory_event(5, 0x1000, -64)}));
  const auto a = pair_allocations(events, 1);
  REQUIRE(a);
  REQUIRE(a->size() == 4);
  CHECK((*a)[0].bytes == 512);
  CHECK((*a)[0].free_ns == 2000);
  CHECK((*a)[0].free_unrecorded);
  CHECK((*a)[1].bytes == 256);
  CHECK((*a)[1].alloc_ns == 2000);
  CHECK((*a)[1].free_ns == 3000);
  CHECK((*a)[1].free_unrecorded);
  CHECK((*a)[2].bytes == 1024);
  CHECK_FALSE((*a)[2].alloc_ns);
  CHECK((*a)[2].free_ns == 3000);
  CHECK_FALSE((*a)[2].free_unrecorded);
  CHECK((*a)[3].bytes == 64);
  CHECK((*a)[3].free_ns == 5000);
  CHECK_FALSE((*a)[3].free_unrecorded);
}

TEST_CASE("the CUDA allocator's Total Allocated times the frees no event records",
          "[importers][memory]") {
  // The caching allocator counts every thread's blocks (Note [Frees the profiler does not see]).
  // t=1 us: 512 B at 0x1000 (total 512); t=2: 1024 B at 0x2000 (1536); t=2.5: 512 B at 0x6000
  // (2048); t=3: 256 B at 0x3000, total 1792 = 2048 + 256 - 512: a 512-byte block was freed
  // unseen, the oldest the trace holds (0x1000). t=4: 64 B at 0x4000 with a total of 1984, 128
  // above the sum (another thread's block counted before its event), which t=5's 128 B at
  // 0x5000 (total 1984) makes up: no free.
  constexpr int kCuda = 1;
  const auto events = parse(json::array(
      {memory_event(1, 0x1000, 512, kCuda, 512), memory_event(2, 0x2000, 1024, kCuda, 1536),
       memory_event(2.5, 0x6000, 512, kCuda, 2048), memory_event(3, 0x3000, 256, kCuda, 1792),
       memory_event(4, 0x4000, 64, kCuda, 1984), memory_event(5, 0x5000, 128, kCuda, 1984)}));
  const auto a = pair_allocations(events, kCuda);
  REQUIRE(a);
  REQUIRE(a->size() == 6);
  CHECK((*a)[0].addr == 0x1000);
  CHECK((*a)[0].free_ns == 3000);
  CHECK((*a)[0].free_unrecorded);
  for (std::size_t i = 1; i < a->size(); ++i) {
    CAPTURE((*a)[i].addr);
    CHECK_FALSE((*a)[i].free_ns);
  }
}

TEST_CASE("the CPU's Total Allocated less the frees it never saw", "[importers][memory]") {
  // ProfiledCPUMemoryReporter subtracts only the frees it reports: the 512 B at 0x1000, freed
  // unseen before t=2 us, stay in its total. t=1: +512 (512); t=2: 0x1000 again, +256 (768);
  // t=3: +1000 at 0x2000 (1768, 1256 really allocated); t=4, t=5: both freed (1512, 512).
  constexpr int kCpu = 0;
  const std::string doc =
      json{{"traceEvents", json::array({memory_event(1, 0x1000, 512, kCpu, 512),
                                        memory_event(2, 0x1000, 256, kCpu, 768),
                                        memory_event(3, 0x2000, 1000, kCpu, 1768),
                                        memory_event(4, 0x1000, -256, kCpu, 1512),
                                        memory_event(5, 0x2000, -1000, kCpu, 512)})}}
          .dump();
  const auto trace = parse_kineto_trace(doc, "m.json");
  memplan::importers::StepWindow step;
  step.start_ns = 0;
  step.end_ns = 10'000;
  const auto cpu = memplan::importers::measure_recorded_step(trace, step, false);
  CHECK(cpu.unrecorded_frees == 1);
  REQUIRE(cpu.peak_total_allocated_bytes);
  CHECK(*cpu.peak_total_allocated_bytes == 1768 - 512);
  CHECK(cpu.peak_above_start_bytes == 1768 - 512);  // the events' sum, with its free
}

TEST_CASE("a string address is refused with the field named", "[importers][memory][bad_input]") {
  json bad = memory_event(1, 0x1000, 512);
  bad["args"]["Addr"] = "0x1000";
  CHECK_THROWS_WITH(parse(json::array({bad})), Catch::Contains("args.Addr"));
}

TEST_CASE("the CUDA caching allocator rounds requests up to 512-byte blocks",
          "[importers][memory]") {
  CHECK(allocator_bytes(1, 1) == 512);
  CHECK(allocator_bytes(512, 1) == 512);
  CHECK(allocator_bytes(513, 1) == 1024);
  CHECK(allocator_bytes(513, 0) == 513);  // the CPU allocator records the request
}

TEST_CASE("the import checks each forward op's output against the allocations the op made",
          "[importers][memory]") {
  // The synthetic step allocates a 64-byte output in every forward op (and a 256-byte scratch
  // buffer it frees again), while the recorded shapes say each output is larger: nothing matches.
  json doc = memplan::test::synthetic_kineto();
  const auto plain = memplan::test::import_json(doc);
  REQUIRE(plain.report.allocations);
  CHECK(plain.report.outputs_checked == plain.report.forward_ops);
  CHECK(plain.report.outputs_confirmed == 0);
  // Give the first op (conv1) an output allocation of its output's size as the allocator rounds
  // it: that one output is now confirmed.
  const auto& w = plain.workload;
  const auto conv_out = w.ops.front().outputs.front();
  const auto bytes = allocator_bytes(w.tensors[static_cast<std::size_t>(conv_out)].bytes, 1);
  for (json& e : doc["traceEvents"]) {
    if (e.value("name", "") == "[memory]" && e["args"]["Bytes"] == 64) {
      e["args"]["Bytes"] = bytes;
      break;
    }
  }
  const auto checked = memplan::test::import_json(doc);
  CHECK(checked.report.outputs_confirmed == 1);
  // The 2021 format has no addresses: no check.
  memplan::test::SyntheticOptions old;
  old.current_format = false;
  CHECK_FALSE(memplan::test::import_json(memplan::test::synthetic_kineto(old)).report.allocations);
}
