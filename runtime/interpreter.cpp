#include "runtime/interpreter.hpp"

#include <algorithm>
#include <array>

#include "sim/check.hpp"
#include "sim/device_arena.hpp"

namespace memplan::runtime {

namespace {

void fill_oom(sim::Timeline& tl, Device& device, const sim::Program& program,
              const sim::Instruction& in, const std::vector<std::uint8_t>& live) {
  const MemoryStats stats = device.memory_stats();
  sim::OomReport r;
  r.op = in.op;
  r.buffer = in.buffer;
  r.requested_bytes =
      sim::DeviceArena::aligned_size(program.buffers[static_cast<std::size_t>(in.buffer)].bytes);
  r.capacity_bytes = stats.capacity_bytes;
  r.largest_free_block = stats.largest_free_block;
  r.bytes_missing = r.requested_bytes - r.largest_free_block;
  for (std::size_t b = 0; b < live.size(); ++b) {
    if (live[b] == 0) continue;
    const sim::Buffer& buf = program.buffers[b];
    r.live_bytes += buf.bytes;
    if (buf.role == sim::BufferRole::kEncoded) {
      r.live_encoded_bytes += buf.bytes;
    } else {
      r.live_by_kind[static_cast<std::size_t>(buf.kind)] += buf.bytes;
    }
  }
  tl.feasible = false;
  tl.oom = r;
}

}  // namespace

sim::Timeline run_program(Device& device, const sim::Workload& workload,
                          const sim::Program& program) {
  sim::Timeline tl;
  tl.op_compute_ns = program.op_compute_ns;
  device.prepare(workload, program);

  std::vector<std::uint8_t> recorded(program.events.size(), 0);
  std::vector<std::uint8_t> live(program.buffers.size(), 0);
  std::array<std::size_t, sim::kStreamCount> pc{};
  bool progress = true;
  bool out_of_memory = false;
  while (progress && !out_of_memory) {
    progress = false;
    for (std::size_t s = 0; s < sim::kStreamCount && !out_of_memory; ++s) {
      const auto& list = program.streams[s];
      const auto stream = static_cast<sim::StreamId>(s);
      std::size_t i = pc[s];
      for (; i < list.size(); ++i) {
        const sim::Instruction& in = list[i];
        const auto index = static_cast<std::int32_t>(i);
        bool blocked = false;
        switch (in.kind) {
          case sim::InstrKind::kRecord:
            device.record(stream, in.aux);
            recorded[static_cast<std::size_t>(in.aux)] = 1;
            break;
          case sim::InstrKind::kWait:
            if (recorded[static_cast<std::size_t>(in.aux)] == 0) {
              blocked = true;
            } else {
              device.wait(stream, in.aux);
            }
            break;
          case sim::InstrKind::kRun:
          case sim::InstrKind::kRecompute:
          case sim::InstrKind::kEncode:
          case sim::InstrKind::kDecode:
            MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "kernels run on the compute stream");
            device.enqueue_kernel(index);
            break;
          case sim::InstrKind::kCopyOut:
          case sim::InstrKind::kCopyIn:
            device.enqueue_copy(stream, index);
            break;
          case sim::InstrKind::kAlloc:
            MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "memory operations are on compute");
            if (!device.allocate(in.buffer)) {
              fill_oom(tl, device, program, in, live);
              out_of_memory = true;
              blocked = true;
            } else {
              live[static_cast<std::size_t>(in.buffer)] = 1;
            }
            break;
          case sim::InstrKind::kFree:
            MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "memory operations are on compute");
            device.free(in.buffer);
            live[static_cast<std::size_t>(in.buffer)] = 0;
            break;
        }
        if (blocked) break;
      }
      if (i != pc[s]) progress = true;
      tl.instructions_executed += i - pc[s];
      pc[s] = i;
    }
  }
  // Drains what was enqueued; after an out-of-memory stop every enqueued wait has its record
  // enqueued too, so this cannot hang.
  device.synchronize();
  if (!out_of_memory) {
    for (std::size_t s = 0; s < sim::kStreamCount; ++s) {
      MEMPLAN_CHECK(pc[s] == program.streams[s].size(),
                    "every wait has a matching record that is reached (no deadlock)");
    }
  }
  tl.spans = device.measured_spans();
  // The step starts with its first instruction that takes time, as in the simulator: setting up
  // (filling inputs and weights) is not part of it.
  if (!tl.spans.empty()) {
    const auto first = std::min_element(
        tl.spans.begin(), tl.spans.end(),
        [](const sim::Span& a, const sim::Span& b) { return a.start_ns < b.start_ns; });
    const sim::Nanoseconds origin = first->start_ns;
    for (sim::Span& span : tl.spans) {
      span.start_ns -= origin;
      span.end_ns -= origin;
    }
  }
  std::sort(tl.spans.begin(), tl.spans.end(), [](const sim::Span& a, const sim::Span& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.stream < b.stream;
  });
  for (const sim::Span& span : tl.spans) tl.iteration_ns = std::max(tl.iteration_ns, span.end_ns);
  const MemoryStats stats = device.memory_stats();
  tl.peak_bytes = stats.peak_bytes;
  tl.peak_reserved_bytes = stats.peak_reserved_bytes;
  return tl;
}

}  // namespace memplan::runtime
