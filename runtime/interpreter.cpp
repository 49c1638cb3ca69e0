#include "runtime/interpreter.hpp"

#include <algorithm>
#include <array>

#include "core/check.hpp"
#include "runtime/backend_error.hpp"
#include "sim/program_walk.hpp"

namespace memplan::runtime {

namespace {

/// Hands each instruction to the device, in the ProgramWalk's order (the engine's).
class Enqueuer {
 public:
  Enqueuer(Device& device, const sim::Program& program, sim::Timeline& timeline)
      : device_(device), program_(program), tl_(timeline), live_(program.buffers.size(), 0) {}

  /// Nothing of a stream is kept between its stretches: the device keeps it.
  struct NoState {};
  NoState enter(sim::StreamId /*stream*/) { return {}; }
  void leave(sim::StreamId /*stream*/, NoState /*state*/) {}

  sim::Step step(sim::StreamId stream, std::size_t position, const sim::Instruction& in,
                 NoState& /*state*/) {
    switch (in.kind) {
      case sim::InstrKind::kRecord:
        device_.record(stream, in.event());
        break;
      case sim::InstrKind::kWait:
        device_.wait(stream, in.event());  // the walk hands it out only once its record was
        break;
      case sim::InstrKind::kRun:
      case sim::InstrKind::kRecompute:
      case sim::InstrKind::kEncode:
      case sim::InstrKind::kDecode:
        MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "kernels run on the compute stream");
        device_.enqueue_kernel(static_cast<std::int32_t>(position));
        break;
      case sim::InstrKind::kCopyOut:
      case sim::InstrKind::kCopyIn:
        device_.enqueue_copy(stream, static_cast<std::int32_t>(position));
        break;
      case sim::InstrKind::kHostRun:
        MEMPLAN_CHECK(stream == sim::StreamId::kHost, "host ops run on the host stream");
        device_.enqueue_host_op(static_cast<std::int32_t>(position));
        break;
      case sim::InstrKind::kAlloc:
        MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "memory operations are on compute");
        if (!device_.allocate(in.buffer)) {
          out_of_memory(in);
          return sim::Step::kStop;
        }
        live_[index(in.buffer)] = 1;
        memory_ops_.push_back(in.op);
        break;
      case sim::InstrKind::kFree:
        MEMPLAN_CHECK(stream == sim::StreamId::kCompute, "memory operations are on compute");
        device_.free(in.buffer);
        live_[index(in.buffer)] = 0;
        memory_ops_.push_back(in.op);
        break;
      case sim::InstrKind::kCollective:
        MEMPLAN_CHECK(false, "run_program refuses programs with side streams");
        break;
    }
    return sim::Step::kNext;
  }

  /// The op each allocation and free the device made serves, in their order.
  [[nodiscard]] const std::vector<sim::OpId>& memory_ops() const { return memory_ops_; }

 private:
  void out_of_memory(const sim::Instruction& in) {
    const MemoryStats stats = device_.memory_stats();
    const auto& live = live_;
    tl_.feasible = false;
    tl_.oom = sim::device_oom_report(program_, in, stats.capacity_bytes,
                                     device_.shortfall(program_.buffers[index(in.buffer)].bytes),
                                     [&live](sim::BufferId b) { return live[index(b)] != 0; });
  }

  Device& device_;
  const sim::Program& program_;
  sim::Timeline& tl_;
  std::vector<std::uint8_t> live_;  // per buffer
  std::vector<sim::OpId> memory_ops_;
};

/// The device's allocator events with the op each serves: an allocation's or free's from the
/// instruction that made it (`ops`, in order), a segment's from the allocation it was taken or
/// given back for (the next one).
std::vector<sim::AllocatorEvent> name_ops(std::vector<sim::AllocatorEvent> events,
                                          const std::vector<sim::OpId>& ops) {
  using Kind = sim::AllocatorEvent::Kind;
  std::size_t next = 0;
  for (sim::AllocatorEvent& e : events) {
    if (e.kind == Kind::kAlloc || e.kind == Kind::kFree) {
      if (next < ops.size()) e.op = ops[next++];
    }
  }
  sim::OpId following = sim::kNoOp;
  for (std::size_t i = events.size(); i-- > 0;) {  // newest first
    sim::AllocatorEvent& e = events[i];
    if (e.kind == Kind::kAlloc) following = e.op;
    if (e.kind != Kind::kAlloc && e.kind != Kind::kFree) e.op = following;
  }
  return events;
}

/// Moves the measured spans so that the step starts at 0 with its first instruction that takes
/// time, as in the simulator (setting up, filling inputs and weights, is not part of it), and
/// sorts them by start.
void align_spans(std::vector<sim::Span>& spans) {
  if (!spans.empty()) {
    const auto first = std::min_element(
        spans.begin(), spans.end(),
        [](const sim::Span& a, const sim::Span& b) { return a.start_ns < b.start_ns; });
    const sim::Nanoseconds origin = first->start_ns;
    for (sim::Span& span : spans) {
      span.start_ns -= origin;
      span.end_ns -= origin;
    }
  }
  std::sort(spans.begin(), spans.end(), [](const sim::Span& a, const sim::Span& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.stream < b.stream;
  });
}

}  // namespace

sim::Timeline run_program(Device& device, const sim::Workload& workload,
                          const sim::Program& program) {
  if (program.streams.size() > static_cast<std::size_t>(sim::kFixedStreamCount)) {
    throw BackendError(
        "the step runs on several device streams (communication or side streams): the backends "
        "run one device's compute, copy and host streams, so it is simulated only");
  }
  sim::Timeline tl;
  tl.op_compute_ns = program.op_compute_ns;
  device.prepare(workload, program);
  Enqueuer enqueuer(device, program, tl);
  sim::ProgramWalk walk;
  walk.run(program, enqueuer);
  tl.instructions_executed = walk.executed();
  // Drains what was enqueued; after an out-of-memory stop every enqueued wait has its record
  // enqueued too, so this cannot hang.
  device.synchronize();
  tl.spans = device.measured_spans();
  align_spans(tl.spans);
  for (const sim::Span& span : tl.spans) {
    tl.iteration_ns = std::max(tl.iteration_ns, span.end_ns);
    if (span.stream == sim::StreamId::kCompute) tl.compute_busy_ns += span.end_ns - span.start_ns;
    if (span.stream == sim::StreamId::kHost) tl.host_ops_ns += span.end_ns - span.start_ns;
  }
  const MemoryStats stats = device.memory_stats();
  tl.peak_bytes = stats.peak_bytes;
  tl.peak_reserved_bytes = stats.peak_reserved_bytes;
  tl.allocator_events = name_ops(device.allocator_events(), enqueuer.memory_ops());
  return tl;
}

}  // namespace memplan::runtime
