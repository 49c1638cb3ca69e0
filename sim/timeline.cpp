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

void Timeline::clear() {
  feasible = true;
  iteration_ns = 0;
  op_compute_ns = 0;
  peak_bytes = 0;
  peak_reserved_bytes = 0;
  peak_host_bytes = 0;
  stall_ns_by_cause = {};
  spans.clear();
  memory.clear();
  stalls.clear();
  oom.reset();
  instructions_executed = 0;
}

}  // namespace memplan::sim
