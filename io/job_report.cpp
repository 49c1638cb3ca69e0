#include "io/job_report.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "io/timeline_export.hpp"

namespace memplan::sim {
namespace {

std::string call_name(const Program& program, const Workload& workload, std::size_t c) {
  const Collective& call = program.collectives[c];
  for (const Op& op : workload.ops) {
    if (op.collective && *op.collective == call) return op.name;
  }
  return std::string(to_string(call.kind));
}

}  // namespace

CollectiveTotals collective_totals(const Timeline& timeline, const Program& program) {
  CollectiveTotals t;
  t.calls = timeline.collectives.size();
  Nanoseconds longest = -1;
  for (std::size_t c = 0; c < timeline.collectives.size(); ++c) {
    const CollectiveTiming& timing = timeline.collectives[c];
    const Collective& call = program.collectives[c];
    t.bytes += std::max(call.in_bytes, call.out_bytes);
    t.transfer_ns = add_ns(t.transfer_ns, timing.transfer_ns());
    t.wait_ns = add_ns(t.wait_ns, timing.wait_ns());
    if (timing.wait_ns() > longest) {
      longest = timing.wait_ns();
      t.longest_wait = c;
    }
  }
  return t;
}

nlohmann::json collectives_json(const Timeline& timeline, const Program& program,
                                const Workload& workload) {
  const CollectiveTotals t = collective_totals(timeline, program);
  nlohmann::json calls = nlohmann::json::array();
  for (std::size_t c = 0; c < timeline.collectives.size(); ++c) {
    const CollectiveTiming& timing = timeline.collectives[c];
    const Collective& call = program.collectives[c];
    calls.push_back({{"op", call_name(program, workload, c)},
                     {"kind", to_string(call.kind)},
                     {"group", call.group},
                     {"sequence", call.sequence},
                     {"in_bytes", call.in_bytes},
                     {"out_bytes", call.out_bytes},
                     {"arrival_ns", timing.arrival_ns},
                     {"start_ns", timing.start_ns},
                     {"end_ns", timing.end_ns},
                     {"wait_s", to_seconds(timing.wait_ns())},
                     {"transfer_s", to_seconds(timing.transfer_ns())}});
  }
  return {{"calls", t.calls},
          {"bytes", t.bytes},
          {"transfer_s", to_seconds(t.transfer_ns)},
          {"wait_s", to_seconds(t.wait_ns)},
          {"by_call", std::move(calls)}};
}

std::string collectives_text(const Timeline& timeline, const Program& program,
                             const Workload& workload) {
  const CollectiveTotals t = collective_totals(timeline, program);
  if (t.calls == 0) return "";
  std::string out = fmt::format("collectives {} calls, {}: transfer {:.3f} ms, waiting {:.3f} ms",
                                t.calls, format_bytes(t.bytes), to_milliseconds(t.transfer_ns),
                                to_milliseconds(t.wait_ns));
  if (t.wait_ns > 0) {
    out +=
        fmt::format(" (longest wait: {}, {:.3f} ms)", call_name(program, workload, t.longest_wait),
                    to_milliseconds(timeline.collectives[t.longest_wait].wait_ns()));
  }
  return out + "\n";
}

std::string job_summary_text(const JobRun& run, const Job& job,
                             const std::vector<Machine>& machines, std::string_view policy) {
  const JobTimeline& jt = run.timeline;
  const Distributed d = job.ranks.front().distributed.value_or(Distributed{});
  std::string out =
      fmt::format("job         {} of {} ranks{}, plan {}\n", job.ranks.size(), job.world_size(),
                  d.backend.empty() ? "" : " (" + d.backend + ")", policy);
  if (const auto& net = machines.front().interconnect) {
    out += fmt::format(
        "interconnect {}: {:.0f} GB/s within a node of {}, {:.0f} GB/s between nodes\n", net->name,
        net->intra.bytes_per_s / 1e9, net->gpus_per_node, net->inter.bytes_per_s / 1e9);
  } else {
    out += "interconnect recorded: each collective takes its recorded transfer time\n";
  }
  if (!jt.feasible) {
    for (std::size_t r = 0; r < jt.ranks.size(); ++r) {
      if (!jt.ranks[r].feasible && jt.ranks[r].oom) {
        out += fmt::format("infeasible  rank {}: {}\n", job.rank_of(r),
                           oom_to_text(*jt.ranks[r].oom, run.programs[r], job.ranks[r]));
      }
    }
    return out;
  }
  out += fmt::format(
      "step        {:.3f} ms back to back ({:.3f} ms alone, from the first rank's start to "
      "the last rank's end: rank {})\n",
      to_milliseconds(run.period_ns), to_milliseconds(jt.step_ns), job.rank_of(jt.slowest));
  out += "rank  start      alone      compute    transfer   waiting    peak\n";
  for (std::size_t r = 0; r < jt.ranks.size(); ++r) {
    const Timeline& tl = jt.ranks[r];
    const CollectiveTotals t = collective_totals(tl, run.programs[r]);
    out +=
        fmt::format("{:<5} {:>7.3f}ms  {:>7.3f}ms  {:>7.3f}ms  {:>7.3f}ms  {:>7.3f}ms  {} of {}\n",
                    job.rank_of(r), to_milliseconds(jt.start_ns[r]),
                    to_milliseconds(tl.iteration_ns), to_milliseconds(tl.op_compute_ns),
                    to_milliseconds(t.transfer_ns), to_milliseconds(t.wait_ns),
                    format_bytes(tl.peak_reserved_bytes), format_bytes(machines[r].memory_bytes));
  }
  return out;
}

nlohmann::json job_summary_json(const JobRun& run, const Job& job,
                                const std::vector<Machine>& machines) {
  const JobTimeline& jt = run.timeline;
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t r = 0; r < jt.ranks.size(); ++r) {
    nlohmann::json j = summary_json(jt.ranks[r], run.programs[r], job.ranks[r], machines[r]);
    j["rank"] = job.rank_of(r);
    j["start_s"] = to_seconds(jt.start_ns[r]);
    j["collectives"] = collectives_json(jt.ranks[r], run.programs[r], job.ranks[r]);
    ranks.push_back(std::move(j));
  }
  const auto when = [&](Nanoseconds ns) {
    return jt.feasible ? nlohmann::json(to_seconds(ns)) : nlohmann::json(nullptr);
  };
  return {
      {"feasible", jt.feasible},
      {"world_size", job.world_size()},
      {"step_s", when(run.period_ns)},
      {"step_alone_s", when(jt.step_ns)},
      {"slowest_rank", jt.feasible ? nlohmann::json(job.rank_of(jt.slowest)) : nlohmann::json()},
      {"rounds", jt.rounds},
      {"ranks", std::move(ranks)}};
}

std::string job_chrome_trace_json(const JobRun& run, const Job& job) {
  std::vector<TraceProcess> processes;
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    processes.push_back({&run.timeline.ranks[r], &run.programs[r], &job.ranks[r],
                         fmt::format("rank {}", job.rank_of(r))});
  }
  return chrome_trace_json(processes);
}

}  // namespace memplan::sim
