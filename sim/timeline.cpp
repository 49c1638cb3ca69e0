#include "sim/timeline.hpp"

namespace memplan::sim {

std::string_view to_string(StallCause cause) {
  switch (cause) {
    case StallCause::kSwapIn:
      return "swap-in";
    case StallCause::kSwapOut:
      return "swap-out";
    case StallCause::kRecompute:
      return "recompute";
    case StallCause::kCodec:
      return "codec";
  }
  return "?";
}

std::string_view to_string(HostActivity activity) {
  switch (activity) {
    case HostActivity::kDispatch:
      return "dispatch";
    case HostActivity::kLaunch:
      return "launch";
    case HostActivity::kSynchronize:
      return "synchronize";
    case HostActivity::kHostUpdate:
      return "host update";
  }
  return "?";
}

OomReport device_oom_report(const Program& program, const Instruction& alloc, Bytes capacity,
                            const DeviceMemory::Shortfall& shortfall,
                            const std::function<bool(BufferId)>& live) {
  OomReport r;
  r.op = alloc.op;
  r.buffer = alloc.buffer;
  r.requested_bytes = shortfall.requested;
  r.capacity_bytes = capacity;
  r.largest_free_block = shortfall.largest_free_block;
  r.bytes_missing = shortfall.missing;
  r.caching = shortfall.caching;
  for (const HostSlot& slot : program.host_slots) {
    if (slot.resident) r.host_resident_bytes += slot.bytes;
  }
  for (std::size_t b = 0; b < program.buffers.size(); ++b) {
    if (!live(buffer_id(b))) continue;
    const Buffer& buf = program.buffers[b];
    r.live_bytes += buf.bytes;
    if (buf.role == BufferRole::kEncoded) {
      r.live_encoded_bytes += buf.bytes;
    } else {
      r.live_by_kind[static_cast<std::size_t>(buf.kind)] += buf.bytes;
    }
  }
  return r;
}

void Timeline::clear() {
  feasible = true;
  saturated = false;
  iteration_ns = 0;
  op_compute_ns = 0;
  peak_bytes = 0;
  peak_reserved_bytes = 0;
  peak_host_bytes = 0;
  stall_ns_by_cause = {};
  spans.clear();
  memory.clear();
  allocator_events.clear();
  stalls.clear();
  host_spans.clear();
  collectives.clear();
  compute_busy_ns = 0;
  host_busy_ns = 0;
  host_end_ns = 0;
  stream_end_ns.clear();
  period_ns = 0;
  host_ops_ns = 0;
  oom.reset();
  instructions_executed = 0;
}

}  // namespace memplan::sim
