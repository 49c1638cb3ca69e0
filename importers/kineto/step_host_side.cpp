// The host side of an imported step (trace format v2) from the CPU events around its ops, by
// CUDA's semantics (host_side.hpp): each op's dispatch time and whether the host waited for the
// device after it, the host's tail, the launch cost, and the link the trace's copies measure.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "importers/kineto/host_side.hpp"
#include "importers/kineto/saturating_add.hpp"
#include "importers/kineto/step_builder.hpp"

// Note [Host side]
// ~~~~~~~~~~~~~~~~
// Trace format v2 gives each op the host time from the previous op's launch to its own (its
// dispatch) and says whether the host waited for the device after launching it. An op's launch is
// the first launch call of the device work attributed to it (Note [Device time] in
// step_units.hpp: a layer op's on the compute stream, a side-stream op's and a collective's on
// theirs), or its CPU start when it launched nothing; launches are taken in issue order
// and never go back in time. A blocking call (importers/kineto/host_side.hpp: synchronize, a
// synchronous or pageable copy, which is what `.item()` and `.cpu()` do) marks the op launched
// last before it as synchronizing, with the host time from that op's launch to the call's start
// as its sync_after_ns (a foreach optimizer launches its kernels one after another for hundreds of
// microseconds, and the device runs them meanwhile: the wait comes after that time, not right
// after the first launch). The waits are left out of the next dispatch: the engine makes the host
// wait for the device instead, so the recorded wait would otherwise count twice. The host tail is
// the time from the last launch to the step's end, less the waits and the sync_after_ns in it.

namespace memplan::importers::detail {

using sim::Nanoseconds;
using sim::OpId;

namespace {

// The blocking calls of the step in time order, consumed as the ops' launches pass them.
class WaitsBefore {
 public:
  WaitsBefore(std::vector<BlockingCall> calls, sim::Workload& workload, ImportReport& report)
      : calls_(std::move(calls)), workload_(workload), report_(report) {}

  /// The host time between the last op's launch (`previous`) and `t` that the engine spends
  /// otherwise than dispatching: the recorded waits, and the last op's sync_after_ns up to the
  /// first blocking call (which marks that op synchronizing).
  Nanoseconds until(Nanoseconds t, OpId last, Nanoseconds previous) {
    Nanoseconds wait = 0;
    Nanoseconds before_call = 0;
    for (; next_ < calls_.size() && calls_[next_].start_ns < t; ++next_) {
      if (last != sim::kNoOp && !workload_.ops[index(last)].host->synchronizes) {
        sim::HostSide& host = *workload_.ops[index(last)].host;
        before_call = std::max<Nanoseconds>(0, calls_[next_].start_ns - previous);
        host.synchronizes = true;
        host.sync_after_ns = before_call;
      }
      wait = saturating_add(wait, calls_[next_].wait_ns);
    }
    report_.blocked_ns = saturating_add(report_.blocked_ns, wait);
    return saturating_add(wait, before_call);
  }

 private:
  std::vector<BlockingCall> calls_;
  std::size_t next_ = 0;
  sim::Workload& workload_;
  ImportReport& report_;
};

}  // namespace

void StepBuilder::fill_host_side(const StepWindow& step) {
  const std::vector<Nanoseconds>& launch = launch_;
  std::vector<BlockingCall> calls = blocking_calls(trace_, step.start_ns, step.end_ns);
  report_.blocking_calls = calls.size();
  WaitsBefore waits(std::move(calls), workload_, report_);
  OpId last = sim::kNoOp;
  Nanoseconds previous = step.start_ns;  // the last op's launch
  for (sim::Op& o : workload_.ops) {
    const Nanoseconds at = std::max(launch[index(o.id)], previous);
    const Nanoseconds accounted = waits.until(at, last, previous);
    o.host = sim::HostSide{.dispatch_ns = std::max<Nanoseconds>(0, at - previous - accounted)};
    previous = at;
    last = o.id;
  }
  const Nanoseconds accounted = waits.until(step.end_ns, last, previous);
  workload_.host_tail_ns = std::max<Nanoseconds>(0, step.end_ns - previous - accounted);
  workload_.launch_ns = median_launch_ns(trace_, step.start_ns, step.end_ns);
  report_.host_ops = workload_.ops.size();
  report_.streams = streams_used(trace_, step.start_ns, step.end_ns).size();
  for (const RecordedCopy& c : recorded_copies(trace_, step.start_ns, step.end_ns)) {
    ++report_.copies;
    if (c.pageable) ++report_.pageable_copies;
    if (c.direction == CopyDirection::kHostToDevice) report_.h2d_bytes += c.bytes;
    if (c.direction == CopyDirection::kDeviceToHost) report_.d2h_bytes += c.bytes;
  }
}

std::string StepBuilder::measure_device_link() {
  const MeasuredLink measured = measure_link(recorded_copies(
      trace_, std::numeric_limits<Nanoseconds>::min(), std::numeric_limits<Nanoseconds>::max()));
  if (!measured.link.has_bandwidth()) return "no copy of 1 MiB or more to measure the link with";
  workload_.device.link = measured.link;
  auto part = [](const char* what, const std::optional<double>& bw, std::size_t n, bool pageable) {
    if (!bw) return fmt::format("{} not measured", what);
    return fmt::format("{} {:.2f} GB/s ({} {} copies)", what, *bw / 1e9, n,
                       pageable ? "pageable" : "pinned");
  };
  return fmt::format(
      "link measured from the recorded copies: {}, {}",
      part("H2D", measured.link.h2d_bytes_per_s, measured.h2d_copies, measured.h2d_pageable),
      part("D2H", measured.link.d2h_bytes_per_s, measured.d2h_copies, measured.d2h_pageable));
}

}  // namespace memplan::importers::detail
