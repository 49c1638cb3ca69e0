#pragma once
// Exports of a Timeline: Chrome trace event JSON (opens in ui.perfetto.dev and chrome://tracing;
// one track per stream, instructions named after their ops and tensors, stalls on their own track,
// the host's dispatches, launches and synchronize waits on a `host` track when the workload has a
// host side, a counter track of device memory) and a CSV of the memory curve. Also the JSON summary
// that `memplan simulate --json` prints.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/machine.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

std::string chrome_trace_json(const Timeline& timeline, const Program& program,
                              const Workload& workload);

/// One process of a trace of several: a rank of a job.
struct TraceProcess {
  const Timeline* timeline = nullptr;
  const Program* program = nullptr;
  const Workload* workload = nullptr;
  std::string name;  // "rank 3"
};
/// One Perfetto process per entry, each with its tracks (a job: a process per rank, a track per
/// device stream).
std::string chrome_trace_json(const std::vector<TraceProcess>& processes);

/// "time_ns,live_bytes,reserved_bytes" then one line per alloc/free.
std::string memory_csv(const Timeline& timeline);

nlohmann::json oom_to_json(const OomReport& oom, const Program& program, const Workload& workload);
/// One line: "out of device memory at op 'conv2' (t=12.3 us): needs 2.00 KiB, largest free ...".
std::string oom_to_text(const OomReport& oom, const Program& program, const Workload& workload);
/// Why a run is not feasible, in one line: oom_to_text of its report, or that its time ran past
/// the clock's end (Timeline::saturated); "" when it says neither (it fits, or its caller knows
/// why: a policy that gave up).
std::string why_not_text(const Timeline& timeline, const Program& program,
                         const Workload& workload);

/// Live device bytes averaged over the step's time: each point of the memory curve holds until the
/// next one, the last until the end of the iteration (vDNN's "average memory usage"). 0 when the
/// run did not finish or took no time.
Bytes average_live_bytes(const Timeline& timeline);

/// feasible, step_s (Timeline::period_ns: set it), step_alone_s, peak_bytes, average_live_bytes,
/// peak_reserved_bytes, peak_host_bytes, stall_s, stall_s_by_cause, compute_s, actions,
/// instructions, machine, oom; with a host side also host_busy_s and gpu_idle_share.
nlohmann::json summary_json(const Timeline& timeline, const Program& program,
                            const Workload& workload, const Machine& machine);
std::string summary_text(const Timeline& timeline, const Program& program, const Workload& workload,
                         const Machine& machine, std::string_view policy);

}  // namespace memplan::sim
