// Property tests on random training graphs (fixed seeds): random forward DAGs with skip
// connections and in-place ops, a backward pass that reads random forward tensors, random plans
// (keep, swap with random prefetch points, recompute, lossy encodings) and random machines. Each
// case checks the engine's promises from the timeline alone, and replays the program to track
// which tensor each device buffer and host slot holds (check_contents): every reader finds the
// tensor it needs, written before it starts and not overwritten or freed while it reads.
#include <algorithm>
#include <limits>
#include <ostream>
#include <random>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/property/random_graphs.hpp"

using namespace memplan::sim;
using namespace memplan::test;

namespace {

struct BufferLife {
  std::size_t alloc_at = std::numeric_limits<std::size_t>::max();
  std::size_t free_at = std::numeric_limits<std::size_t>::max();
  Nanoseconds alloc_ns = -1;
  Nanoseconds free_ns = std::numeric_limits<Nanoseconds>::max();
  Nanoseconds first_use_end_ns = -1;  // end of the first compute instruction that uses it
};

// What a device buffer or a host slot holds: a tensor's values, its encoded form, or nothing
// valid (a fresh allocation, or workspace scratch).
struct Content {
  TensorId tensor = kNoTensor;
  bool encoded = false;
  bool operator==(const Content&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Content& c) {
  if (c.tensor == kNoTensor) return os << "nothing valid";
  return os << (c.encoded ? "encoded tensor " : "tensor ") << value(c.tensor);
}

// One content of a buffer: valid from `from_ns` (its writer ended) until `until_ns` (the next
// writer started, or the buffer was freed).
struct Version {
  Content content;
  Nanoseconds from_ns = 0;
  Nanoseconds until_ns = std::numeric_limits<Nanoseconds>::max();
};

// The host side of the replay: copy-outs read a device buffer whose content is the slot's tensor
// and stays put while copied; host runs and copy-ins read slots that hold their tensors.
// `history(b)` is what check_contents tracked for device buffer b.
template <class History>
void check_host_slots(const Workload& w, const Program& p, const Timeline& tl,
                      const History& history) {
  constexpr Nanoseconds kNever = std::numeric_limits<Nanoseconds>::max();
  const auto& h2d = p.stream(StreamId::kH2D);
  auto slot_content = [&](std::int32_t slot) {
    return Content{p.host_slots[static_cast<std::size_t>(slot)].tensor, false};
  };
  // Copy-outs read a buffer whose content stays put for the whole copy; they fill host slots. A
  // resident slot (a host-placed tensor's home) holds its tensor from the start; copy-outs (an
  // update on the device written back) and host runs write it again.
  std::vector<Version> slot(p.host_slots.size(), Version{Content{}, kNever, kNever});
  std::vector<std::vector<std::pair<Nanoseconds, Nanoseconds>>> writes(p.host_slots.size());
  for (std::size_t k = 0; k < p.host_slots.size(); ++k) {
    if (p.host_slots[k].resident) slot[k] = {slot_content(static_cast<std::int32_t>(k)), 0, kNever};
  }
  for (const Span& s : tl.spans) {
    if (s.stream != StreamId::kD2H) continue;
    const Instruction& in = p.stream(StreamId::kD2H)[static_cast<std::size_t>(s.index)];
    REQUIRE(in.kind == InstrKind::kCopyOut);
    // The content current when the copy starts: the last one written by then.
    const Version* current = nullptr;
    for (const Version& v : history(in.buffer)) {
      if (v.from_ns <= s.start_ns) current = &v;
    }
    REQUIRE(current != nullptr);
    REQUIRE(current->content == slot_content(in.aux));
    REQUIRE(current->until_ns >= s.end_ns);  // not overwritten or freed while copied
    writes[static_cast<std::size_t>(in.aux)].emplace_back(s.start_ns, s.end_ns);
    if (!p.host_slots[static_cast<std::size_t>(in.aux)].resident)
      slot[static_cast<std::size_t>(in.aux)] = {slot_content(in.aux), s.end_ns, kNever};
  }
  // A host run reads slots that hold its inputs (a gradient's copy-out has ended, a temporary
  // has been written by an earlier run) and writes the resident ones (parameters, updated in
  // place) and its outputs' (temporaries, in a slot of their own or their base's).
  for (const Span& s : tl.spans) {
    if (s.stream != StreamId::kHost) continue;
    const Instruction& in = p.stream(StreamId::kHost)[static_cast<std::size_t>(s.index)];
    REQUIRE(in.kind == InstrKind::kHostRun);
    const Op& op = w.op(in.op);
    REQUIRE(static_cast<std::size_t>(in.operand_count) == op.inputs.size() + op.outputs.size());
    for (std::int32_t k = 0; k < in.operand_count; ++k) {
      const auto at = index(p.operand_slot(in, k));
      const auto n = static_cast<std::size_t>(k);
      if (n >= op.inputs.size()) {  // an output
        REQUIRE(p.host_slots[at].temporary);
        slot[at] = {Content{op.outputs[n - op.inputs.size()], false}, s.end_ns, kNever};
        continue;
      }
      REQUIRE(slot[at].content.tensor == op.inputs[n]);
      REQUIRE(slot[at].from_ns <= s.start_ns);
      for (const auto& [from, to] : writes[at]) REQUIRE(to <= s.start_ns);
      if (p.host_slots[at].resident) writes[at].emplace_back(s.start_ns, s.end_ns);
    }
  }
  // Copy-ins read a host slot that holds the buffer's tensor: filled by a finished copy-out, or
  // resident and not written meanwhile; a write-back into a parameter's own buffer comes after
  // every write of its slot (the update).
  for (const Span& s : tl.spans) {
    if (s.stream != StreamId::kH2D) continue;
    const Instruction& in = h2d[static_cast<std::size_t>(s.index)];
    const auto at = static_cast<std::size_t>(in.aux);
    const Version& from = slot[at];
    REQUIRE(from.content.tensor != kNoTensor);
    REQUIRE(from.from_ns <= s.start_ns);
    REQUIRE(from.content.tensor == p.buffers[static_cast<std::size_t>(in.buffer)].tensor);
    const bool write_back = p.buffers[static_cast<std::size_t>(in.buffer)].initial;
    if (write_back) REQUIRE(!writes[at].empty());
    for (const auto& [w_from, w_to] : writes[at]) {
      REQUIRE((s.start_ns >= w_to || (!write_back && s.end_ns <= w_from)));
    }
  }
}

// The host peak is the most bytes the host slots hold at once, as HostSlot says they are held
// (core/program.hpp), read from the spans: a resident slot the whole step, a copy's slot from its
// copy-out's start to its copy-in's end, a temporary from the start of the first host run that
// names it to the end of the last; at one time, releases before takes.
void check_host_peak(const Program& p, const Timeline& tl) {
  std::vector<std::pair<Nanoseconds, Bytes>> changes;
  std::vector<std::pair<Nanoseconds, Nanoseconds>> temporary(p.host_slots.size(), {-1, -1});
  for (const HostSlot& slot : p.host_slots) {
    if (slot.resident) changes.emplace_back(0, slot.bytes);
  }
  for (const Span& s : tl.spans) {
    const Instruction& in = p.stream(s.stream)[static_cast<std::size_t>(s.index)];
    if (in.kind == InstrKind::kCopyOut || in.kind == InstrKind::kCopyIn) {
      const HostSlot& slot = p.host_slots[index(in.slot())];
      if (slot.resident) continue;
      if (in.kind == InstrKind::kCopyOut) changes.emplace_back(s.start_ns, slot.bytes);
      if (in.kind == InstrKind::kCopyIn) changes.emplace_back(s.end_ns, -slot.bytes);
    } else if (in.kind == InstrKind::kHostRun) {
      for (std::int32_t k = 0; k < in.operand_count; ++k) {
        const auto at = index(p.operand_slot(in, k));
        if (!p.host_slots[at].temporary) continue;
        if (temporary[at].first < 0) temporary[at].first = s.start_ns;
        temporary[at].second = s.end_ns;
      }
    }
  }
  for (std::size_t k = 0; k < p.host_slots.size(); ++k) {
    if (temporary[k].first < 0) continue;
    changes.emplace_back(temporary[k].first, p.host_slots[k].bytes);
    changes.emplace_back(temporary[k].second, -p.host_slots[k].bytes);
  }
  std::sort(changes.begin(), changes.end());
  Bytes live = 0;
  Bytes peak = 0;
  for (const auto& [time, delta] : changes) {
    live += delta;
    peak = std::max(peak, live);
  }
  REQUIRE(peak == tl.peak_host_bytes);
}

// Replays the program against its timeline and tracks, per device buffer, which tensor it holds
// and since when: a run or recompute writes its outputs, an encode its encoded buffer, a decode
// the full map, a copy-in the prefetched map (at the copy's end); an allocation holds nothing
// valid. Every read (an op's inputs, an encode's source, a decode's encoded buffer, a copy-out's
// source, a copy-in's host slot) must find the expected tensor, written before the reader started,
// not overwritten or freed before the reader ended. The tensor a buffer holds is tracked from the
// instructions, not taken from Buffer::tensor, so an in-place op that hands a buffer to its
// output, or a lowering that allocates a buffer but never fills it, shows.
void check_contents(const Workload& w, const Program& p, const Timeline& tl, std::size_t executed) {
  const auto& compute = p.stream(StreamId::kCompute);
  const auto& h2d = p.stream(StreamId::kH2D);
  enum class State : std::uint8_t { kUnallocated, kLive, kFreed };
  struct BufferState {
    State state = State::kUnallocated;
    std::vector<Version> history;
    std::int32_t copy_in = -1;        // the H2D instruction that fills it, if any
    const Span* copy_span = nullptr;  // its span, when it ran
    bool copied_in = false;           // the copy's content is in the history
  };
  std::vector<BufferState> buf(p.buffers.size());
  std::vector<Nanoseconds> start(compute.size(), -1), end(compute.size(), -1);
  for (const Span& s : tl.spans) {
    if (s.stream == StreamId::kCompute) {
      start[static_cast<std::size_t>(s.index)] = s.start_ns;
      end[static_cast<std::size_t>(s.index)] = s.end_ns;
    }
  }
  for (std::size_t i = 0; i < h2d.size(); ++i) {
    if (h2d[i].kind != InstrKind::kCopyIn) continue;
    // A write-back of an updated parameter into its own buffer (checked below), not a prefetch.
    if (p.buffers[static_cast<std::size_t>(h2d[i].buffer)].initial) continue;
    auto& b = buf[static_cast<std::size_t>(h2d[i].buffer)];
    REQUIRE(b.copy_in < 0);  // one prefetch per buffer
    b.copy_in = static_cast<std::int32_t>(i);
  }
  for (const Span& s : tl.spans) {
    if (s.stream == StreamId::kH2D &&
        buf[static_cast<std::size_t>(h2d[static_cast<std::size_t>(s.index)].buffer)].copy_in ==
            s.index)
      buf[static_cast<std::size_t>(h2d[static_cast<std::size_t>(s.index)].buffer)].copy_span = &s;
  }
  auto slot_content = [&](std::int32_t slot) {
    return Content{p.host_slots[static_cast<std::size_t>(slot)].tensor, false};
  };
  // A buffer a copy-in fills is not touched by compute before the copy has landed.
  auto settle = [&](BufferId id, Nanoseconds t) {
    auto& b = buf[static_cast<std::size_t>(id)];
    if (b.copy_in < 0 || b.copied_in) return;
    REQUIRE(b.copy_span != nullptr);  // the prefetch ran
    REQUIRE(b.copy_span->end_ns <= t);
    REQUIRE(!b.history.empty());
    b.history.back().until_ns = b.copy_span->start_ns;
    b.history.push_back(
        {slot_content(h2d[static_cast<std::size_t>(b.copy_in)].aux), b.copy_span->end_ns});
    b.copied_in = true;
  };
  auto read = [&](BufferId id, Content expected, Nanoseconds t) {
    CAPTURE(id, expected.tensor, expected.encoded, t);
    settle(id, t);
    auto& b = buf[static_cast<std::size_t>(id)];
    REQUIRE(b.state == State::kLive);  // allocated, and nothing is read after it is freed
    REQUIRE(b.history.back().content == expected);
    REQUIRE(b.history.back().from_ns <= t);  // produced before the reader starts
  };
  auto write = [&](BufferId id, Content content, Nanoseconds from, Nanoseconds to) {
    settle(id, from);
    auto& b = buf[static_cast<std::size_t>(id)];
    REQUIRE(b.state == State::kLive);
    b.history.back().until_ns = from;
    b.history.push_back({content, to});
  };
  std::size_t mem = 0;
  for (std::size_t i = 0; i < executed; ++i) {
    const Instruction& in = compute[i];
    CAPTURE(i, to_string(in.kind), in.op);
    switch (in.kind) {
      case InstrKind::kAlloc: {
        auto& b = buf[static_cast<std::size_t>(in.buffer)];
        const Buffer& info = p.buffers[static_cast<std::size_t>(in.buffer)];
        REQUIRE(b.state == State::kUnallocated);
        b.state = State::kLive;
        // Parameters and the input are resident, with their values, when the step starts
        // (unless placed on the host: their device copies are filled by copy-ins).
        b.history.push_back(
            {info.initial ? Content{info.tensor, false} : Content{}, tl.memory[mem++].time_ns});
        break;
      }
      case InstrKind::kFree: {
        auto& b = buf[static_cast<std::size_t>(in.buffer)];
        REQUIRE(b.state == State::kLive);
        b.state = State::kFreed;
        b.history.back().until_ns = tl.memory[mem++].time_ns;
        break;
      }
      case InstrKind::kRun:
      case InstrKind::kRecompute: {
        const Op& op = w.op(in.op);
        const auto n_in = static_cast<std::int32_t>(op.inputs.size());
        const auto n_out = static_cast<std::int32_t>(op.outputs.size());
        REQUIRE((in.operand_count == n_in + n_out || in.operand_count == n_in + n_out + 1));
        auto operand = [&](std::int32_t k) { return p.operand_buffer(in, k); };
        for (std::int32_t k = 0; k < n_in; ++k)
          read(operand(k), {op.inputs[static_cast<std::size_t>(k)], false}, start[i]);
        for (std::int32_t k = 0; k < n_out; ++k) {
          const TensorId o = op.outputs[static_cast<std::size_t>(k)];
          const TensorId base = w.tensor(o).in_place_of;
          if (base != kNoTensor) {
            // Written over its base: the buffer the op read the base from.
            const auto it = std::find(op.inputs.begin(), op.inputs.end(), base);
            REQUIRE(it != op.inputs.end());
            REQUIRE(operand(static_cast<std::int32_t>(it - op.inputs.begin())) ==
                    operand(n_in + k));
          } else {
            REQUIRE(p.buffers[static_cast<std::size_t>(operand(n_in + k))].role ==
                    BufferRole::kTensor);
          }
          write(operand(n_in + k), {o, false}, start[i], end[i]);
        }
        if (in.operand_count == n_in + n_out + 1) {
          const BufferId ws = operand(n_in + n_out);
          REQUIRE(p.buffers[static_cast<std::size_t>(ws)].role == BufferRole::kWorkspace);
          REQUIRE(p.buffers[static_cast<std::size_t>(ws)].op == in.op);
          write(ws, Content{}, start[i], end[i]);
        }
        break;
      }
      case InstrKind::kEncode:
      case InstrKind::kDecode: {
        const Buffer& encoded = p.buffers[index(in.encoded())];
        REQUIRE(encoded.role == BufferRole::kEncoded);
        // (The full buffer's Buffer::tensor may be the base of an in-place output: its content
        // is what counts.)
        const Content full{encoded.tensor, false};
        const Content small{encoded.tensor, true};
        if (in.kind == InstrKind::kEncode) {
          read(in.buffer, full, start[i]);
          write(in.encoded(), small, start[i], end[i]);
        } else {
          read(in.encoded(), small, start[i]);
          write(in.buffer, full, start[i], end[i]);
        }
        break;
      }
      default:
        break;
    }
  }
  check_host_slots(w, p, tl, [&](BufferId b) -> const std::vector<Version>& {
    return buf[static_cast<std::size_t>(b)].history;
  });
}

// Checks every promise on one simulated run; returns the number of failed checks through Catch.
void check_run(const Workload& w, const Program& p, const Timeline& tl, const Machine& m) {
  const auto& compute = p.stream(StreamId::kCompute);
  std::vector<BufferLife> life(p.buffers.size());
  // Times of compute instructions: spans for timed ones, memory points for alloc/free.
  std::vector<Nanoseconds> start(compute.size(), -1), end(compute.size(), -1);
  std::size_t mem = 0;
  for (const Span& s : tl.spans) {
    if (s.stream != StreamId::kCompute) continue;
    start[static_cast<std::size_t>(s.index)] = s.start_ns;
    end[static_cast<std::size_t>(s.index)] = s.end_ns;
  }
  std::size_t executed = compute.size();
  if (!tl.feasible) {
    // Only instructions before the failed alloc ran.
    executed = 0;
    std::size_t allocs_and_frees = 0;
    for (; executed < compute.size(); ++executed) {
      const auto k = compute[executed].kind;
      if (k == InstrKind::kAlloc || k == InstrKind::kFree) {
        if (allocs_and_frees == tl.memory.size()) break;
        ++allocs_and_frees;
      }
    }
    REQUIRE(executed < compute.size());
    REQUIRE(compute[executed].kind == InstrKind::kAlloc);
  }
  for (std::size_t i = 0; i < executed; ++i) {
    const Instruction& in = compute[i];
    if (in.kind == InstrKind::kAlloc || in.kind == InstrKind::kFree) {
      REQUIRE(mem < tl.memory.size());
      auto& l = life[static_cast<std::size_t>(in.buffer)];
      if (in.kind == InstrKind::kAlloc) {
        REQUIRE(l.alloc_at == std::numeric_limits<std::size_t>::max());  // allocated once
        l.alloc_at = i;
        l.alloc_ns = tl.memory[mem].time_ns;
      } else {
        REQUIRE(l.alloc_at < i);  // freed after allocated, once
        REQUIRE(l.free_at == std::numeric_limits<std::size_t>::max());
        l.free_at = i;
        l.free_ns = tl.memory[mem].time_ns;
      }
      ++mem;
      continue;
    }
    auto use = [&](BufferId b) {
      auto& l = life[static_cast<std::size_t>(b)];
      REQUIRE(l.alloc_at < i);                                        // allocated before use
      REQUIRE(l.free_at == std::numeric_limits<std::size_t>::max());  // nothing used after free
      REQUIRE(l.alloc_ns <= start[i]);
      if (l.first_use_end_ns < 0) l.first_use_end_ns = end[i];
    };
    if (in.kind == InstrKind::kRun || in.kind == InstrKind::kRecompute) {
      REQUIRE(in.operand_count >= 0);
      for (std::int32_t k = 0; k < in.operand_count; ++k) use(p.operand_buffer(in, k));
    } else if (in.kind == InstrKind::kEncode || in.kind == InstrKind::kDecode) {
      use(in.buffer);
      use(in.encoded());
    }
  }
  check_contents(w, p, tl, executed);
  if (tl.feasible) check_host_peak(p, tl);
  // Copies: a copy-out reads a buffer that was written and is not freed before the copy ends; a
  // copy-in lands before any compute instruction reads the buffer.
  for (const Span& s : tl.spans) {
    if (s.stream == StreamId::kCompute || s.stream == StreamId::kHost) continue;
    const Instruction& in = p.stream(s.stream)[static_cast<std::size_t>(s.index)];
    const auto& l = life[static_cast<std::size_t>(in.buffer)];
    REQUIRE(l.alloc_ns >= 0);
    REQUIRE(l.alloc_ns <= s.start_ns);
    if (in.kind == InstrKind::kCopyOut) {
      REQUIRE(l.first_use_end_ns >= 0);
      REQUIRE(l.first_use_end_ns <= s.start_ns);  // the producer wrote it first
      REQUIRE(s.end_ns <= l.free_ns);
    } else {
      REQUIRE(in.kind == InstrKind::kCopyIn);
      // A prefetch lands before compute reads its buffer; a write-back into a parameter's own
      // buffer starts after compute's last read of it.
      const bool write_back = p.buffers[static_cast<std::size_t>(in.buffer)].initial;
      for (std::size_t i = 0; i < executed; ++i) {
        const Instruction& c = compute[i];
        bool reads = false;
        if (c.kind == InstrKind::kRun || c.kind == InstrKind::kRecompute) {
          for (std::int32_t k = 0; k < c.operand_count; ++k) {
            reads = reads || p.operand_buffer(c, k) == in.buffer;
          }
        }
        if (reads && write_back) REQUIRE(end[i] <= s.start_ns);
        if (reads && !write_back) REQUIRE(start[i] >= s.end_ns);
      }
      REQUIRE(s.end_ns <= l.free_ns);
    }
    REQUIRE(s.end_ns - s.start_ns >= m.link.latency_ns);
  }
  // Same-direction copies never overlap.
  for (StreamId stream : {StreamId::kD2H, StreamId::kH2D}) {
    Nanoseconds previous_end = 0;
    for (const Span& s : tl.spans) {
      if (s.stream != stream) continue;
      REQUIRE(s.start_ns >= previous_end);
      previous_end = s.end_ns;
    }
  }
  // Memory.
  for (const MemoryPoint& pt : tl.memory) {
    REQUIRE(pt.live_bytes >= 0);
    REQUIRE(pt.reserved_bytes <= m.memory_bytes);
    REQUIRE(pt.live_bytes <= pt.reserved_bytes);
  }
  if (tl.feasible) {
    REQUIRE(tl.peak_reserved_bytes <= m.memory_bytes);
    REQUIRE(tl.peak_bytes <= m.memory_bytes);
    REQUIRE(tl.iteration_ns >= tl.op_compute_ns);
    // The compute stream is busy with ops or stalled; a trailing copy may end after it.
    Nanoseconds compute_end = 0;
    for (const Span& s : tl.spans) {
      if (s.stream == StreamId::kCompute) compute_end = std::max(compute_end, s.end_ns);
    }
    // (With the update on the host, compute may end waiting for a gradient's copy-out.)
    for (const Stall& s : tl.stalls) compute_end = std::max(compute_end, s.end_ns);
    REQUIRE(compute_end == tl.op_compute_ns + tl.stall_ns());
    REQUIRE(tl.iteration_ns >= compute_end);
    REQUIRE(!w.ops.empty());
    REQUIRE(tl.memory.back().live_bytes >= 0);
  } else {
    REQUIRE(tl.oom);
    REQUIRE(tl.oom->requested_bytes > tl.oom->largest_free_block);
    REQUIRE(tl.oom->bytes_missing > 0);
  }
}

}  // namespace

TEST_CASE("random graphs and plans keep the engine's promises", "[property]") {
  constexpr int kCases = 1200;
  Engine engine;  // reused across cases, as a search would
  int infeasible = 0;
  int with_copies = 0;
  int lossless = 0;
  int host_placed = 0;
  int host_updates = 0;
  int host_temporaries = 0;
  int moved_host_prefetches = 0;
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed));
    const Workload w = random_workload(rng);
    const Plan plan = random_plan(w, rng);
    const Bytes peak = incore_peak(w).bytes;
    Machine m;
    m.memory_bytes =
        uniform(rng, 0, 2) == 0 ? peak * 4 + 65536 : uniform(rng, peak / 3 + 512, peak * 2 + 4096);
    m.link.h2d_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
    m.link.d2h_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
    m.link.latency_ns = uniform(rng, 0, 2000);
    m.memory_bandwidth_bytes_per_s = static_cast<double>(uniform(rng, 1, 1000)) * 1e9;
    const Program program = lower(w, plan);
    const Timeline first = engine.run(program, m);
    check_run(w, program, first, m);
    if (!first.feasible) ++infeasible;
    if (!program.stream(StreamId::kD2H).empty()) ++with_copies;
    host_placed += plan.host_tensors.empty() ? 0 : 1;
    moved_host_prefetches += plan.host_prefetches.empty() ? 0 : 1;
    host_updates += plan.host_update && first.feasible ? 1 : 0;
    host_temporaries +=
        first.feasible && std::any_of(program.host_slots.begin(), program.host_slots.end(),
                                      [](const HostSlot& s) { return s.temporary; })
            ? 1
            : 0;
    for (const Decision& d : plan.decisions) {
      lossless += d.encoding == Encoding::kBinarize || d.encoding == Encoding::kSparse ? 1 : 0;
    }

    // Same input, same output: lowering again (with a reused Lowerer that lowered another plan
    // first) and simulating on a fresh engine.
    Lowerer lowerer(w);
    Program again;
    lowerer.lower(in_core_plan(w), again);
    lowerer.lower(plan, again);
    for (int s = 0; s < kFixedStreamCount; ++s) {
      REQUIRE(again.streams[static_cast<std::size_t>(s)].size() ==
              program.streams[static_cast<std::size_t>(s)].size());
    }
    REQUIRE(again.operands == program.operands);
    REQUIRE(again.buffers.size() == program.buffers.size());
    REQUIRE(again.action_counts == program.action_counts);
    Engine fresh;
    const Timeline& second = fresh.run(again, m);
    REQUIRE(again.instruction_count() == program.instruction_count());
    REQUIRE(second.feasible == first.feasible);
    REQUIRE(second.iteration_ns == first.iteration_ns);
    REQUIRE(second.peak_bytes == first.peak_bytes);
    REQUIRE(second.peak_reserved_bytes == first.peak_reserved_bytes);
    REQUIRE(second.spans.size() == first.spans.size());
    for (std::size_t i = 0; i < first.spans.size(); ++i) {
      REQUIRE(second.spans[i].start_ns == first.spans[i].start_ns);
      REQUIRE(second.spans[i].end_ns == first.spans[i].end_ns);
    }
    REQUIRE(second.memory.size() == first.memory.size());

    // Recording nothing changes no total.
    EngineOptions lean;
    lean.record_spans = false;
    lean.record_memory = false;
    lean.record_stalls = false;
    const Timeline& quiet = fresh.run(program, m, lean);
    REQUIRE(quiet.feasible == first.feasible);
    REQUIRE(quiet.iteration_ns == first.iteration_ns);
    REQUIRE(quiet.peak_bytes == first.peak_bytes);
    REQUIRE(quiet.peak_reserved_bytes == first.peak_reserved_bytes);
    REQUIRE(quiet.stall_ns_by_cause == first.stall_ns_by_cause);
    REQUIRE(quiet.spans.empty());
    REQUIRE(quiet.memory.empty());

    // In core with room to spare: nothing else runs, so the iteration is the summed compute time
    // and the peak is the liveness peak.
    const Program in_core = lower(w, in_core_plan(w));
    Machine roomy = m;
    roomy.memory_bytes = peak * 4 + 65536;
    const Timeline& base = engine.run(in_core, roomy);
    REQUIRE(base.feasible);
    Nanoseconds compute = 0;
    for (const Op& op : w.ops) compute += op.duration_ns;
    REQUIRE(base.iteration_ns == compute);
    REQUIRE(base.stall_ns() == 0);
    REQUIRE(base.peak_bytes == peak);
    check_run(w, in_core, base, roomy);
  }
  // The generator must exercise both outcomes and the copy engines.
  CHECK(infeasible > kCases / 20);
  CHECK(infeasible < kCases);
  CHECK(with_copies > kCases / 2);
  CHECK(lossless > kCases / 100);              // binarize and sparse maps do occur
  CHECK(host_placed > kCases / 5);             // host placement in about a third of the plans
  CHECK(host_updates > kCases / 50);           // and host updates that run to the end
  CHECK(host_temporaries > kCases / 100);      // some making temporaries on the host
  CHECK(moved_host_prefetches > kCases / 10);  // and host copies prefetched at other points
}
