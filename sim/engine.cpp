#include "sim/engine.hpp"

#include <algorithm>
#include <cmath>

#include "sim/check.hpp"

namespace memplan::sim {

namespace {
Nanoseconds codec_ns(Bytes bytes, BytesPerSecond bandwidth) {
  return transfer_ns(bytes, bandwidth);  // saturating, like every time below (sim/units.hpp)
}
void add_stall(Timeline& tl, StallCause cause, Nanoseconds duration) {
  auto& total = tl.stall_ns_by_cause[static_cast<std::size_t>(cause)];
  total = add_ns(total, duration);
}
}  // namespace

const Timeline& Engine::run(const Program& program, const Machine& machine,
                            const EngineOptions& options) {
  Timeline& tl = timeline_;
  tl.clear();
  tl.op_compute_ns = program.op_compute_ns;
  arena_.reset(machine.memory_bytes);
  event_time_.assign(program.events.size(), -1);
  block_.assign(program.buffers.size(), -1);
  host_changes_.clear();
  if (options.record_spans) tl.spans.reserve(program.instruction_count());

  std::array<Nanoseconds, kStreamCount> now{};
  std::array<std::size_t, kStreamCount> pc{};
  Bytes live = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t s = 0; s < kStreamCount; ++s) {
      const auto& list = program.streams[s];
      const auto stream = static_cast<StreamId>(s);
      Nanoseconds t = now[s];
      std::size_t i = pc[s];
      for (; i < list.size(); ++i) {
        const Instruction& in = list[i];
        Nanoseconds duration = -1;
        switch (in.kind) {
          case InstrKind::kRecord:
            event_time_[static_cast<std::size_t>(in.aux)] = t;
            break;
          case InstrKind::kWait: {
            const Nanoseconds at = event_time_[static_cast<std::size_t>(in.aux)];
            if (at < 0) goto blocked;
            if (at > t) {
              if (stream == StreamId::kCompute) {
                const Event& e = program.events[static_cast<std::size_t>(in.aux)];
                const StallCause cause =
                    e.cause == WaitCause::kSwapOut ? StallCause::kSwapOut : StallCause::kSwapIn;
                add_stall(tl, cause, at - t);
                if (options.record_stalls) tl.stalls.push_back({cause, e.tensor, in.op, t, at});
              }
              t = at;
            }
            break;
          }
          case InstrKind::kRun:
            duration = in.duration_ns;
            break;
          case InstrKind::kRecompute:
            duration = in.duration_ns;
            add_stall(tl, StallCause::kRecompute, duration);
            if (options.record_stalls) {
              tl.stalls.push_back({StallCause::kRecompute, kNoId, in.op, t, add_ns(t, duration)});
            }
            break;
          case InstrKind::kEncode:
          case InstrKind::kDecode: {
            const Buffer& full = program.buffers[static_cast<std::size_t>(in.buffer)];
            duration = codec_ns(full.bytes, machine.memory_bandwidth_bytes_per_s);
            add_stall(tl, StallCause::kCodec, duration);
            if (options.record_stalls) {
              tl.stalls.push_back({StallCause::kCodec, full.tensor, in.op, t, add_ns(t, duration)});
            }
            break;
          }
          case InstrKind::kCopyOut: {
            const Bytes bytes = program.host_slots[static_cast<std::size_t>(in.aux)].bytes;
            duration = machine.d2h_copy_ns(bytes);
            host_changes_.emplace_back(t, bytes);
            break;
          }
          case InstrKind::kCopyIn: {
            const Bytes bytes = program.host_slots[static_cast<std::size_t>(in.aux)].bytes;
            duration = machine.h2d_copy_ns(bytes);
            host_changes_.emplace_back(add_ns(t, duration), -bytes);
            break;
          }
          case InstrKind::kAlloc: {
            const auto b = static_cast<std::size_t>(in.buffer);
            const auto placed = arena_.allocate_block(program.buffers[b].bytes);
            if (!placed) {
              now[s] = t;
              pc[s] = i;
              out_of_memory(program, in, t);
              return tl;
            }
            block_[b] = placed->handle;
            live += program.buffers[b].bytes;
            tl.peak_bytes = std::max(tl.peak_bytes, live);
            if (options.record_memory) tl.memory.push_back({t, live, arena_.reserved_bytes()});
            break;
          }
          case InstrKind::kFree: {
            const auto b = static_cast<std::size_t>(in.buffer);
            MEMPLAN_CHECK(block_[b] >= 0, "a buffer is freed only while allocated");
            arena_.release_block(block_[b]);
            block_[b] = -1;
            live -= program.buffers[b].bytes;
            if (options.record_memory) tl.memory.push_back({t, live, arena_.reserved_bytes()});
            break;
          }
        }
        if (duration >= 0) {
          if (options.record_spans) {
            tl.spans.push_back({stream, static_cast<std::int32_t>(i), t, add_ns(t, duration)});
          }
          t = add_ns(t, duration);
        }
      }
    blocked:
      if (i != pc[s]) progress = true;
      tl.instructions_executed += i - pc[s];
      pc[s] = i;
      now[s] = t;
    }
  }
  for (std::size_t s = 0; s < kStreamCount; ++s) {
    MEMPLAN_CHECK(
        pc[s] == program.streams[s].size(),
        "every wait has a matching record that is reached (the program does not deadlock)");
  }
  tl.iteration_ns = *std::max_element(now.begin(), now.end());
  tl.peak_reserved_bytes = arena_.peak_reserved_bytes();
  host_peak(machine);
  return tl;
}

void Engine::host_peak(const Machine& machine) {
  if (host_changes_.empty()) return;
  // Releases at a time come before takes at the same time.
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

void Engine::out_of_memory(const Program& program, const Instruction& in, Nanoseconds now) {
  Timeline& tl = timeline_;
  tl.feasible = false;
  OomReport r;
  r.op = in.op;
  r.buffer = in.buffer;
  r.time_ns = now;
  r.requested_bytes =
      DeviceArena::aligned_size(program.buffers[static_cast<std::size_t>(in.buffer)].bytes);
  r.capacity_bytes = arena_.capacity();
  r.largest_free_block = arena_.largest_free_block();
  r.bytes_missing = r.requested_bytes - r.largest_free_block;
  for (std::size_t b = 0; b < block_.size(); ++b) {
    if (block_[b] < 0) continue;
    const Buffer& buf = program.buffers[b];
    r.live_bytes += buf.bytes;
    if (buf.role == BufferRole::kEncoded) {
      r.live_encoded_bytes += buf.bytes;
    } else {
      r.live_by_kind[static_cast<std::size_t>(buf.kind)] += buf.bytes;
    }
  }
  tl.oom = r;
  tl.peak_reserved_bytes = arena_.peak_reserved_bytes();
  tl.iteration_ns = now;
}

Bytes capacity_to_run(const Program& program, const Machine& machine) {
  const EngineOptions totals{.record_spans = false, .record_memory = false, .record_stalls = false};
  Engine engine;
  Machine m = machine;
  m.memory_bytes = std::int64_t{1} << 50;
  const Bytes unlimited = engine.run(program, m, totals).peak_reserved_bytes;
  Bytes capacity = unlimited;
  for (;;) {
    m.memory_bytes = capacity;
    const Timeline& t = engine.run(program, m, totals);
    if (t.feasible || capacity >= 2 * unlimited) return capacity;
    // Grow by what was missing, and by at least 1/64 so that the search takes few steps.
    const Bytes missing = t.oom ? t.oom->bytes_missing : 0;
    capacity = std::min(2 * unlimited, capacity + std::max(missing, unlimited / 64 + 1));
  }
}

}  // namespace memplan::sim
