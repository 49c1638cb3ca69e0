#include "core/program.hpp"

#include <fmt/format.h>

namespace memplan::sim {

std::string_view to_string(StreamId stream) {
  switch (stream) {
    case StreamId::kCompute:
      return "compute";
    case StreamId::kD2H:
      return "d2h";
    case StreamId::kH2D:
      return "h2d";
    case StreamId::kHost:
      return "host";
  }
  return "side stream";
}

std::string_view to_string(InstrKind kind) {
  switch (kind) {
    case InstrKind::kRun:
      return "run";
    case InstrKind::kRecompute:
      return "recompute";
    case InstrKind::kEncode:
      return "encode";
    case InstrKind::kDecode:
      return "decode";
    case InstrKind::kCopyOut:
      return "copy-out";
    case InstrKind::kCopyIn:
      return "copy-in";
    case InstrKind::kAlloc:
      return "alloc";
    case InstrKind::kFree:
      return "free";
    case InstrKind::kRecord:
      return "record";
    case InstrKind::kWait:
      return "wait";
    case InstrKind::kHostRun:
      return "host-run";
    case InstrKind::kCollective:
      return "collective";
  }
  return "?";
}

std::string_view to_string(WaitCause cause) {
  switch (cause) {
    case WaitCause::kProducer:
      return "producer";
    case WaitCause::kAlloc:
      return "alloc";
    case WaitCause::kSwapOut:
      return "swap-out";
    case WaitCause::kSwapIn:
      return "swap-in";
    case WaitCause::kIssue:
      return "issue";
    case WaitCause::kStream:
      return "stream";
  }
  return "?";
}

std::string buffer_label(BufferId b, const Program& p, const Workload& w) {
  if (b == kNoBuffer) return "?";
  const Buffer& buf = p.buffers[index(b)];
  switch (buf.role) {
    case BufferRole::kWorkspace:
      return fmt::format("workspace of {}", w.op(buf.op).name);
    case BufferRole::kEncoded:
      return fmt::format("{} ({})", w.tensor(buf.tensor).name, to_string(buf.encoding));
    case BufferRole::kTensor:
      return w.tensor(buf.tensor).name;
  }
  return "?";
}

std::string instruction_label(const Instruction& in, const Program& p, const Workload& w) {
  switch (in.kind) {
    case InstrKind::kRun:
    case InstrKind::kCollective:
      return w.op(in.op).name;
    case InstrKind::kHostRun:
      return fmt::format("{} (host)", w.op(in.op).name);
    case InstrKind::kRecompute:
      return fmt::format("{} (recompute)", w.op(in.op).name);
    case InstrKind::kEncode:  // named after the map as stored, not the buffer's first tensor
      return fmt::format("encode {}", w.tensor(p.buffers[index(in.encoded())].tensor).name);
    case InstrKind::kDecode:
    case InstrKind::kAlloc:
    case InstrKind::kFree:
      return fmt::format("{} {}", to_string(in.kind), buffer_label(in.buffer, p, w));
    case InstrKind::kCopyOut:
    case InstrKind::kCopyIn:
      return fmt::format("{} {}", to_string(in.kind),
                         w.tensor(p.host_slots[index(in.slot())].tensor).name);
    case InstrKind::kRecord:
    case InstrKind::kWait: {
      const Event& e = p.events[index(in.event())];
      return fmt::format("{} {} {}", to_string(in.kind), to_string(e.cause),
                         e.tensor == kNoTensor ? "" : w.tensor(e.tensor).name);
    }
  }
  return "?";
}

}  // namespace memplan::sim
