#include "sim/engine.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace memplan::sim {

/// One run's simulated time: the ProgramWalk's driver. Keeps each stream's clock and, with
/// kHostStream, the host's (Note [Host stream]); writes the Timeline of its Engine. A stream's
/// clock is the walk's State while the stream advances.
template <bool kHostStream>
class Engine::Clock {
 public:
  Clock(Engine& engine, const Program& program, const Machine& machine,
        const EngineOptions& options)
      : e_(engine),
        tl_(engine.timeline_),
        program_(program),
        machine_(machine),
        options_(options),
        now_(program.streams.size(), 0) {
    if (!options.stream_ready_ns.empty()) {
      MEMPLAN_CHECK(options.stream_ready_ns.size() == now_.size(),
                    "a backlog is given for every stream of the program");
      now_ = options.stream_ready_ns;
    }
    MEMPLAN_CHECK(options.collective_ready_ns.empty() ||
                      (options.collective_ready_ns.size() >= program.workload_collectives &&
                       options.collective_ready_ns.size() <= program.collectives.size()),
                  "a ready time is given for every collective of the workload or for none");
    tl_.collectives.assign(program.collectives.size(), {});
  }

  Nanoseconds enter(StreamId stream) const { return now_[static_cast<std::size_t>(stream)]; }
  void leave(StreamId stream, Nanoseconds t) { now_[static_cast<std::size_t>(stream)] = t; }

  Step step(StreamId stream, std::size_t index, const Instruction& in, Nanoseconds& t) {
    if (kHostStream && stream == StreamId::kCompute) issue(index, t);
    switch (in.kind) {
      case InstrKind::kRecord:
        return record(stream, in, t);
      case InstrKind::kWait:
        wait(stream, in, t);
        return Step::kNext;
      case InstrKind::kAlloc:
        return !options_.device_memory || allocate(in, t) ? Step::kNext : Step::kStop;
      case InstrKind::kFree:
        if (options_.device_memory) release(in, t);
        return Step::kNext;
      default:
        return timed(stream, index, in, t);
    }
  }

  /// The step's wall time once every stream is done: max(device end, host end + tail).
  Nanoseconds wall_ns() {
    if (sync_pending_) settle_host(now_[0]);
    tl_.stream_end_ns = now_;
    const Nanoseconds device = *std::max_element(now_.begin(), now_.end());
    if (!kHostStream) return device;
    // A host update's runs are the dispatching thread's (Note [Host stream]): it leaves the step
    // once they are done.
    const auto host_runs = static_cast<std::size_t>(StreamId::kHost);
    if (!program_.streams[host_runs].empty() && now_[host_runs] > host_now_) {
      if (options_.record_spans) {
        tl_.host_spans.push_back({HostActivity::kHostUpdate, program_.streams[host_runs].back().op,
                                  host_now_, now_[host_runs]});
      }
      host_now_ = now_[host_runs];
    }
    tl_.host_end_ns = add_ns(host_now_, program_.host.tail_ns);
    return std::max(device, tl_.host_end_ns);
  }

 private:
  Step record(StreamId stream, const Instruction& in, Nanoseconds t) {
    Nanoseconds happens = t;
    Step next = Step::kNext;
    if (kHostStream && stream == StreamId::kCompute) {
      const WaitCause cause = program_.events[index(in.event())].cause;
      if (cause == WaitCause::kProducer || cause == WaitCause::kAlloc) {
        // A copy stream waits for this event to start a copy: the host launches that copy here.
        happens = std::max(t, host_work(HostActivity::kLaunch, in.op, program_.host.launch_ns));
      } else if (cause == WaitCause::kIssue && program_.host.ops[index(in.op)].synchronizes) {
        next = synchronize(in.op);  // a side stream's op the host waits for
      }
    }
    e_.event_time_[index(in.event())] = happens;
    return next;
  }

  /// After the host launched synchronizing op `op`: the other streams catch up before it goes on.
  Step synchronize(OpId op) {
    sync_pending_ = true;
    sync_op_ = op;
    return Step::kPause;
  }

  void wait(StreamId stream, const Instruction& in, Nanoseconds& t) {
    const Nanoseconds happened = e_.event_time_[index(in.event())];
    if (happened <= t) return;
    const Event& event = program_.events[index(in.event())];
    if (stream == StreamId::kCompute &&
        (event.cause == WaitCause::kSwapOut || event.cause == WaitCause::kSwapIn)) {
      const StallCause cause =
          event.cause == WaitCause::kSwapOut ? StallCause::kSwapOut : StallCause::kSwapIn;
      stall(cause, event.tensor, in.op, t, happened - t);
    }
    t = happened;
  }

  Step timed(StreamId stream, std::size_t index, const Instruction& in, Nanoseconds& t) {
    const Nanoseconds duration = start(in, t);
    if (options_.record_spans) {
      tl_.spans.push_back({stream, static_cast<std::int32_t>(index), t, add_ns(t, duration)});
    }
    if (stream == StreamId::kHost && in.kind == InstrKind::kHostRun)
      host_temporaries(index, in, t, add_ns(t, duration));
    t = add_ns(t, duration);
    if (stream == StreamId::kHost) tl_.host_ops_ns = add_ns(tl_.host_ops_ns, duration);
    if (kHostStream && stream == StreamId::kCompute && in.kind == InstrKind::kRun &&
        program_.host.ops[sim::index(in.op)].synchronizes) {
      return synchronize(in.op);
    }
    return Step::kNext;
  }

  /// The duration of a run, recompute, codec or copy about to start at `t`, which moves to the
  /// instruction's launch on the host when that is later.
  Nanoseconds start(const Instruction& in, Nanoseconds& t) {
    switch (in.kind) {
      case InstrKind::kRun:
        return in.duration_ns;
      case InstrKind::kRecompute:
        launched(in, t);
        stall(StallCause::kRecompute, kNoTensor, in.op, t, in.duration_ns);
        return in.duration_ns;
      case InstrKind::kEncode:
      case InstrKind::kDecode: {
        launched(in, t);
        const Buffer& full = program_.buffers[index(in.buffer)];
        const Nanoseconds duration = machine_.codec_ns(full.bytes);
        stall(StallCause::kCodec, full.tensor, in.op, t, duration);
        return duration;
      }
      case InstrKind::kCopyOut: {
        const HostSlot& slot = program_.host_slots[index(in.slot())];
        if (!slot.resident) e_.host_changes_.emplace_back(t, slot.bytes);
        return machine_.d2h_copy_ns(slot.bytes);
      }
      case InstrKind::kCopyIn: {
        const HostSlot& slot = program_.host_slots[index(in.slot())];
        const Nanoseconds duration = machine_.h2d_copy_ns(slot.bytes);
        if (!slot.resident) e_.host_changes_.emplace_back(add_ns(t, duration), -slot.bytes);
        return duration;
      }
      case InstrKind::kHostRun:
        return machine_.host_op_ns(host_op_bytes(in));
      case InstrKind::kCollective:
        return collective(in, t);
      default:
        MEMPLAN_CHECK(false, "only runs, recomputes, codecs and copies take time");
        return 0;
    }
  }

  /// A collective reached at `t` (Note [Collective start]): it starts once its group has arrived.
  Nanoseconds collective(const Instruction& in, Nanoseconds& t) {
    const std::size_t c = in.collective();
    CollectiveTiming& timing = tl_.collectives[c];
    timing.arrival_ns = t;
    if (c < options_.collective_ready_ns.size()) t = std::max(t, options_.collective_ready_ns[c]);
    const Nanoseconds duration = machine_.collective_ns(program_.collectives[c], in.duration_ns,
                                                        program_.rank, program_.world_size);
    timing.start_ns = t;
    timing.end_ns = add_ns(t, duration);
    return duration;
  }

  /// Host run `index` of the host stream, from `start` to `end`: the temporaries it names first
  /// are taken at its start, those it names last let go at its end (HostSlot), once each (an op
  /// writing over its input names that slot twice).
  void host_temporaries(std::size_t index, const Instruction& in, Nanoseconds start,
                        Nanoseconds end) {
    if (e_.host_first_run_.empty()) return;  // no temporaries
    const auto run = static_cast<std::int64_t>(index);
    for (std::int32_t k = 0; k < in.operand_count; ++k) {
      const auto slot = sim::index(program_.operand_slot(in, k));
      const Bytes bytes = program_.host_slots[slot].bytes;
      if (e_.host_first_run_[slot] == run) {
        e_.host_changes_.emplace_back(start, bytes);
        e_.host_first_run_[slot] = -1;
      }
      if (e_.host_last_run_[slot] == run) {
        e_.host_changes_.emplace_back(end, -bytes);
        e_.host_last_run_[slot] = -1;
      }
    }
  }

  /// Host memory a host op streams: each operand once (an input read, an output written: a
  /// temporary), and a resident one twice (read and written back: parameters and optimizer state,
  /// updated in place).
  Bytes host_op_bytes(const Instruction& in) const {
    Bytes bytes = 0;
    for (std::int32_t k = 0; k < in.operand_count; ++k) {
      const HostSlot& slot = program_.host_slots[index(program_.operand_slot(in, k))];
      bytes += slot.resident ? 2 * slot.bytes : slot.bytes;
    }
    return bytes;
  }

  /// A compute instruction the plan added: the host launches it first.
  void launched(const Instruction& in, Nanoseconds& t) {
    if (kHostStream)
      t = std::max(t, host_work(HostActivity::kLaunch, in.op, program_.host.launch_ns));
  }

  void stall(StallCause cause, TensorId tensor, OpId op, Nanoseconds from, Nanoseconds length) {
    auto& total = tl_.stall_ns_by_cause[static_cast<std::size_t>(cause)];
    total = add_ns(total, length);  // saturating, like every time here (core/units.hpp)
    if (options_.record_stalls)
      tl_.stalls.push_back({cause, tensor, op, from, add_ns(from, length)});
  }

  bool allocate(const Instruction& in, Nanoseconds t) {
    const Bytes bytes = program_.buffers[index(in.buffer)].bytes;
    const auto placed = e_.memory_.allocate(bytes);
    if (!placed) {
      out_of_memory(in, t);
      return false;
    }
    e_.block_[index(in.buffer)] = placed->handle;
    live_ += bytes;
    tl_.peak_bytes = std::max(tl_.peak_bytes, live_);
    if (options_.record_memory) {
      tl_.memory.push_back({t, live_, e_.memory_.reserved_bytes()});
      record_allocation(in, *placed, t);
    }
    return true;
  }

  // The allocator's events of an allocation: the segments it gave back, the pages it unmapped and
  // mapped, the segment it took, then the block.
  void record_allocation(const Instruction& in, const DeviceMemory::Placed& placed, Nanoseconds t) {
    using Kind = AllocatorEvent::Kind;
    for (const DeviceMemory::Segment s : e_.memory_.segments_released()) {
      tl_.allocator_events.push_back({Kind::kSegmentFree, t, kNoBuffer, in.op, s, 0, 0});
    }
    for (const auto& c : e_.memory_.pages_changed()) {
      tl_.allocator_events.push_back({c.mapped ? Kind::kSegmentMap : Kind::kSegmentUnmap, t,
                                      kNoBuffer, in.op, c.segment, c.offset, c.bytes});
    }
    if (const auto s = e_.memory_.segment_created()) {
      tl_.allocator_events.push_back(
          {Kind::kSegmentAlloc, t, kNoBuffer, in.op, *s, 0, e_.memory_.segment_bytes(*s)});
    }
    tl_.allocator_events.push_back(
        {Kind::kAlloc, t, in.buffer, in.op, placed.segment, placed.offset, placed.size});
    e_.placed_[index(in.buffer)] = {placed.segment, placed.offset, placed.size};
  }

  void release(const Instruction& in, Nanoseconds t) {
    std::optional<DeviceMemory::Handle>& block = e_.block_[index(in.buffer)];
    MEMPLAN_CHECK(block.has_value(), "a buffer is freed only while allocated");
    e_.memory_.release(*block);
    block.reset();
    live_ -= program_.buffers[index(in.buffer)].bytes;
    if (options_.record_memory) {
      tl_.memory.push_back({t, live_, e_.memory_.reserved_bytes()});
      const auto& [segment, offset, bytes] = e_.placed_[index(in.buffer)];
      tl_.allocator_events.push_back(
          {AllocatorEvent::Kind::kFree, t, in.buffer, in.op, segment, offset, bytes});
    }
  }

  void out_of_memory(const Instruction& in, Nanoseconds t) {
    const auto& block = e_.block_;
    OomReport r = device_oom_report(program_, in, e_.memory_.capacity(),
                                    e_.memory_.shortfall(program_.buffers[index(in.buffer)].bytes),
                                    [&block](BufferId b) { return block[index(b)].has_value(); });
    r.time_ns = t;
    tl_.feasible = false;
    tl_.oom = r;
    tl_.peak_reserved_bytes = e_.memory_.peak_reserved_bytes();
    tl_.iteration_ns = t;
  }

  /// The host spends `length` on `activity` for `op`; returns the host's time after it.
  Nanoseconds host_work(HostActivity activity, OpId op, Nanoseconds length) {
    if (length > 0 && options_.record_spans) {
      tl_.host_spans.push_back({activity, op, host_now_, add_ns(host_now_, length)});
    }
    host_now_ = add_ns(host_now_, length);
    tl_.host_busy_ns = add_ns(tl_.host_busy_ns, length);
    return host_now_;
  }

  /// The host issues compute instruction `index`: after a synchronizing op it first waits for
  /// the device; an op's first instruction costs its dispatch; nothing starts before its issue.
  void issue(std::size_t index, Nanoseconds& t) {
    if (sync_pending_) settle_host(t);
    const HostProgram& host = program_.host;
    if (next_op_ < host.dispatch_at.size() && index == host.dispatch_at[next_op_]) {
      const OpId op = op_id(next_op_++);
      host_work(HostActivity::kDispatch, op, host.ops[sim::index(op)].dispatch_ns);
    }
    t = std::max(t, host_now_);
  }

  /// After a synchronizing op: the host works on until its blocking call (sync_after_ns), then
  /// waits for every device instruction issued so far (the compute stream is at `compute`, the
  /// copy streams have gone as far as they can).
  void settle_host(Nanoseconds compute) {
    sync_pending_ = false;
    host_work(HostActivity::kDispatch, sync_op_,
              program_.host.ops[sim::index(sync_op_)].sync_after_ns);
    Nanoseconds device = compute;
    for (std::size_t s = 1; s < now_.size(); ++s) device = std::max(device, now_[s]);
    if (device <= host_now_) return;
    if (options_.record_spans) {
      tl_.host_spans.push_back({HostActivity::kSynchronize, sync_op_, host_now_, device});
    }
    host_now_ = device;
  }

  Engine& e_;
  Timeline& tl_;
  const Program& program_;
  const Machine& machine_;
  const EngineOptions& options_;
  std::vector<Nanoseconds> now_;  // per stream
  Bytes live_ = 0;
  Nanoseconds host_now_ = 0;
  std::size_t next_op_ = 0;  // the next op the host dispatches
  bool sync_pending_ = false;
  OpId sync_op_ = kNoOp;
};

const Timeline& Engine::run(const Program& program, const Machine& machine,
                            const EngineOptions& options) {
  Timeline& tl = timeline_;
  tl.clear();
  tl.op_compute_ns = program.op_compute_ns;
  memory_.reset(machine.allocator, machine.memory_bytes, machine.allocator_config);
  event_time_.assign(program.events.size(), 0);
  block_.assign(program.buffers.size(), std::nullopt);
  if (options.record_memory) placed_.assign(program.buffers.size(), {});
  host_changes_.clear();
  for (const HostSlot& slot : program.host_slots) {
    if (slot.resident) host_changes_.emplace_back(0, slot.bytes);  // held for the whole step
  }
  host_temporary_runs(program);
  if (options.record_spans) tl.spans.reserve(program.instruction_count());

  const WalkEnd end = program.host.active() ? walk<true>(program, machine, options)
                                            : walk<false>(program, machine, options);
  tl.instructions_executed = walk_.executed();
  if (end == WalkEnd::kStopped) return tl;  // out of memory: the clock wrote the report
  // Every run is timed once, recomputes and codecs are timed where they stand.
  tl.compute_busy_ns = tl.op_compute_ns +
                       tl.stall_ns_by_cause[static_cast<std::size_t>(StallCause::kRecompute)] +
                       tl.stall_ns_by_cause[static_cast<std::size_t>(StallCause::kCodec)];
  tl.peak_reserved_bytes = memory_.peak_reserved_bytes();
  host_peak(machine);
  if (tl.iteration_ns >= kMaxNanoseconds) {  // the clock saturated: no time is known
    tl.saturated = true;
    tl.feasible = false;
  }
  return tl;
}

template <bool kHostStream>
WalkEnd Engine::walk(const Program& program, const Machine& machine, const EngineOptions& options) {
  Clock<kHostStream> clock(*this, program, machine, options);
  const WalkEnd end = walk_.run(program, clock);
  if (end == WalkEnd::kFinished) timeline_.iteration_ns = clock.wall_ns();
  return end;
}

// Per host slot, the first and last host runs that name it (indices into the host stream) when
// some slot is a temporary (HostSlot); else both lists stay empty. The run resets each once it
// has taken or let go of the slot.
void Engine::host_temporary_runs(const Program& program) {
  host_first_run_.clear();
  host_last_run_.clear();
  const auto& slots = program.host_slots;
  if (std::none_of(slots.begin(), slots.end(), [](const HostSlot& s) { return s.temporary; }))
    return;
  host_first_run_.assign(slots.size(), -1);
  host_last_run_.assign(slots.size(), -1);
  const auto& host = program.stream(StreamId::kHost);
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i].kind != InstrKind::kHostRun) continue;
    for (std::int32_t k = 0; k < host[i].operand_count; ++k) {
      const auto slot = index(program.operand_slot(host[i], k));
      if (!slots[slot].temporary) continue;
      if (host_first_run_[slot] < 0) host_first_run_[slot] = static_cast<std::int64_t>(i);
      host_last_run_[slot] = static_cast<std::int64_t>(i);
    }
  }
}

void Engine::host_peak(const Machine& machine) {
  if (host_changes_.empty()) return;
  // Releases at a time come before takes at the same time (a host run that makes or reads a
  // temporary takes some time: it streams it).
  std::sort(host_changes_.begin(), host_changes_.end());
  Bytes live = 0;
  for (const auto& [time, delta] : host_changes_) {
    live += delta;
    timeline_.peak_host_bytes = std::max(timeline_.peak_host_bytes, live);
    if (machine.host_memory_bytes && live > *machine.host_memory_bytes && !timeline_.oom) {
      OomReport r;
      r.host = true;
      r.time_ns = time;
      r.requested_bytes = delta;
      r.capacity_bytes = *machine.host_memory_bytes;
      r.live_bytes = live - delta;
      r.bytes_missing = live - *machine.host_memory_bytes;
      timeline_.oom = r;
      timeline_.feasible = false;
    }
  }
}

Bytes capacity_to_run(const Program& program, const Machine& machine) {
  const EngineOptions totals = EngineOptions::totals();
  Engine engine;
  Machine m = machine;
  m.memory_bytes = std::int64_t{1} << 50;
  return engine.run(program, m, totals).peak_reserved_bytes;
}

Nanoseconds step_period_ns(Engine& engine, const Program& program, const Machine& machine,
                           const Timeline& alone,
                           const std::vector<Nanoseconds>& collective_ready_ns) {
  // A handful of steps reach the fixed point on real traces (one or two when the host is the
  // bottleneck, three or four until a growing backlog grows by the same each step); a backlog
  // still moving otherwise after this many is taken as growing by its average.
  constexpr int kMaxSteps = 16;
  if (!alone.feasible) return 0;
  if (!program.host.active()) return alone.iteration_ns;
  // The steps after the first allocate as it did: their times alone (Note [Runs without device
  // memory]).
  EngineOptions options = EngineOptions::times();
  options.collective_ready_ns = collective_ready_ns;
  const Timeline* tl = &alone;  // read before each run: `alone` may be the engine's own
  // Absolute times: `start` is the host's start of the step just replayed.
  Nanoseconds start = 0;
  Nanoseconds first_device_end = 0;
  Nanoseconds device_end = 0;
  Nanoseconds growth = -1;  // of the device's end over the step before
  for (int step = 1;; ++step) {
    const Nanoseconds host_end = tl->host_end_ns;
    const Nanoseconds end =
        add_ns(start, *std::max_element(tl->stream_end_ns.begin(), tl->stream_end_ns.end()));
    if (step == 1) first_device_end = end;
    if (step >= 2 && end < kMaxNanoseconds) {
      // The device is the bottleneck once its backlog grows by the same every step: the period
      // is that growth (the host's launches no longer reach its queue's head).
      if (end - device_end == growth && growth > host_end) return growth;
      growth = end - device_end;
    }
    device_end = end;
    std::vector<Nanoseconds> backlog(tl->stream_end_ns.size());
    for (std::size_t s = 0; s < backlog.size(); ++s) {
      backlog[s] = std::max<Nanoseconds>(0, tl->stream_end_ns[s] - host_end);
    }
    const bool idle =
        std::all_of(backlog.begin(), backlog.end(), [](Nanoseconds b) { return b == 0; });
    if (backlog == options.stream_ready_ns || (step == 1 && idle)) return host_end;  // fixed point
    if (step == kMaxSteps) break;
    if (device_end >= kMaxNanoseconds) return kMaxNanoseconds;  // past the clock's end
    start = add_ns(start, host_end);
    options.stream_ready_ns = backlog;
    tl = &engine.run(program, machine, options);
  }
  // The backlog grows: the device is the bottleneck, and the period is its growth per step.
  if (device_end >= kMaxNanoseconds) return kMaxNanoseconds;
  return (device_end - first_device_end) / (kMaxSteps - 1);
}

void set_step_period(Timeline& timeline, const Program& program, const Machine& machine,
                     const std::vector<Nanoseconds>& collective_ready_ns) {
  Engine engine;
  timeline.period_ns = step_period_ns(engine, program, machine, timeline, collective_ready_ns);
  if (timeline.period_ns >= kMaxNanoseconds) {
    timeline.saturated = true;
    timeline.feasible = false;
  }
}

}  // namespace memplan::sim
