#include "sim/job_simulation.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "core/check.hpp"
#include "sim/lowering.hpp"

namespace memplan::sim {
namespace {

/// Which call of the job a collective is: (process group, sequence) for a group's collective;
/// ("", lower rank, higher rank, its order among that pair's calls) for a send or recv.
using CallKey = std::tuple<std::string, std::int32_t, std::int32_t, std::int64_t>;

/// A call and the (rank, collective) pairs that make it.
using Calls = std::map<CallKey, std::vector<std::pair<std::size_t, std::size_t>>>;

Calls match_calls(const std::vector<const Program*>& programs) {
  Calls calls;
  for (std::size_t r = 0; r < programs.size(); ++r) {
    const Program& p = *programs[r];
    std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> pair_calls;
    for (std::size_t c = 0; c < p.collectives.size(); ++c) {
      const Collective& call = p.collectives[c];
      CallKey key;
      if (call.kind == CollectiveKind::kSend || call.kind == CollectiveKind::kRecv) {
        const auto pair = std::minmax(p.rank, call.peer);
        key = {"", pair.first, pair.second, pair_calls[pair]++};
      } else {
        key = {call.group, -1, -1, call.sequence};
      }
      calls[key].emplace_back(r, c);
    }
  }
  return calls;
}

}  // namespace

JobTimeline simulate_job(const std::vector<const Program*>& programs,
                         const std::vector<Machine>& machines, const EngineOptions& options) {
  MEMPLAN_CHECK(programs.size() == machines.size() && !programs.empty(),
                "a job simulates one Machine per Program, and at least one");
  const Calls calls = match_calls(programs);
  std::vector<Engine> engines(programs.size());
  std::vector<EngineOptions> rank_options(programs.size(), options);
  for (std::size_t r = 0; r < programs.size(); ++r)
    rank_options[r].collective_ready_ns.assign(programs[r]->collectives.size(), 0);

  JobTimeline job;
  job.ranks.resize(programs.size());
  std::size_t collectives = 0;
  for (const Program* p : programs) collectives += p->collectives.size();
  for (bool moved = true; moved;) {
    ++job.rounds;
    MEMPLAN_CHECK(static_cast<std::size_t>(job.rounds) <= collectives + 1,
                  "the ready times settle within one round per collective (max-plus monotone)");
    for (std::size_t r = 0; r < programs.size(); ++r) {
      job.ranks[r] = engines[r].run(*programs[r], machines[r], rank_options[r]);
      if (!job.ranks[r].feasible) job.feasible = false;
    }
    if (!job.feasible) break;
    moved = false;
    for (const auto& [key, members] : calls) {
      Nanoseconds ready = 0;
      for (const auto& [r, c] : members)
        ready = std::max(ready, job.ranks[r].collectives[c].arrival_ns);
      for (const auto& [r, c] : members) {
        Nanoseconds& at = rank_options[r].collective_ready_ns[c];
        if (at != ready) {
          at = ready;
          moved = true;
        }
      }
    }
  }
  if (!job.feasible) return job;
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    if (job.ranks[r].iteration_ns > job.step_ns) {
      job.step_ns = job.ranks[r].iteration_ns;
      job.slowest = r;
    }
  }
  return job;
}

JobRun simulate_job(const Job& job, const std::vector<Plan>& plans,
                    const std::vector<Machine>& machines, const EngineOptions& options) {
  MEMPLAN_CHECK(plans.size() == job.ranks.size() && machines.size() == job.ranks.size(),
                "one plan and one machine per rank");
  JobRun run;
  run.programs.reserve(job.ranks.size());
  for (std::size_t r = 0; r < job.ranks.size(); ++r)
    run.programs.push_back(lower(job.ranks[r], plans[r]));
  std::vector<const Program*> programs;
  for (const Program& p : run.programs) programs.push_back(&p);
  run.timeline = simulate_job(programs, machines, options);
  if (!run.timeline.feasible) return run;
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    Timeline& tl = run.timeline.ranks[r];
    std::vector<Nanoseconds> ready;
    ready.reserve(tl.collectives.size());
    for (const CollectiveTiming& c : tl.collectives) ready.push_back(c.start_ns);
    tl.period_ns = step_period_ns(run.programs[r], machines[r], tl, ready);
    run.period_ns = std::max(run.period_ns, tl.period_ns);
  }
  return run;
}

}  // namespace memplan::sim
