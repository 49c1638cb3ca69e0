#pragma once
// Reports of a job's step (sim/job_simulation.hpp): per rank and for the job — the slowest rank
// sets the step — and of every collective how much of it was transfer and how much waiting for a
// later peer (Note [Collective start] in sim/engine.hpp). The text `memplan simulate` prints for a
// job, its `--json`, and the Perfetto timeline with a process per rank and a track per device
// stream. A single rank's collectives are summed the same way (collectives_json, collectives_text).
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "sim/job_simulation.hpp"

namespace memplan::sim {

/// What one rank's collectives took: calls, transfer and waiting, summed over the step.
struct CollectiveTotals {
  std::size_t calls = 0;
  Bytes bytes = 0;  // of the larger of each call's input and output
  Nanoseconds transfer_ns = 0;
  Nanoseconds wait_ns = 0;
  std::size_t longest_wait = 0;  // the call (index into Program::collectives) that waited longest
};
CollectiveTotals collective_totals(const Timeline& timeline, const Program& program);

/// {"calls", "bytes", "transfer_s", "wait_s", "by_call": [{op, kind, group, sequence, bytes,
/// arrival_ns, start_ns, end_ns, wait_s, transfer_s}, ...]}.
nlohmann::json collectives_json(const Timeline& timeline, const Program& program,
                                const Workload& workload);
/// "collectives 12 calls, 96.0 MiB: transfer 3.210 ms, waiting 0.800 ms (longest: ar#7, 0.4 ms)".
std::string collectives_text(const Timeline& timeline, const Program& program,
                             const Workload& workload);

/// The job's text report: the step and the slowest rank, then a line per rank.
std::string job_summary_text(const JobRun& run, const Job& job,
                             const std::vector<Machine>& machines, std::string_view policy);
/// {"ranks": [each rank's summary_json with "rank" and "collectives"], "step_s" (back to back),
/// "step_alone_s", "slowest_rank", "feasible", "rounds", "world_size"}.
nlohmann::json job_summary_json(const JobRun& run, const Job& job,
                                const std::vector<Machine>& machines);
/// Perfetto/Chrome trace JSON: a process per rank ("rank 3"), a track per device stream.
std::string job_chrome_trace_json(const JobRun& run, const Job& job);

}  // namespace memplan::sim
