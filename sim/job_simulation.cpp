#include "sim/job_simulation.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "core/basic_plans.hpp"
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

/// Where one rank's step starts in the job's time, and what its streams still have to do then (Note
/// [Step period] in sim/engine.hpp): each rank's Timeline is in its own frame, from its start.
struct RankStart {
  Nanoseconds offset_ns = 0;
  std::vector<Nanoseconds> backlog_ns;  // per stream; empty: idle
};

/// One step of every rank together (the rounds of the header's comment), each rank from its start.
class JointStep {
 public:
  JointStep(const std::vector<const Program*>& programs, const std::vector<Machine>& machines,
            const EngineOptions& options)
      : programs_(programs),
        machines_(machines),
        calls_(match_calls(programs)),
        engines_(programs.size()),
        options_(programs.size(), options) {
    MEMPLAN_CHECK(programs.size() == machines.size() && !programs.empty(),
                  "a job simulates one Machine per Program, and at least one");
    for (const Program* p : programs) collectives_ += p->collectives.size();
  }

  JobTimeline run(const std::vector<RankStart>& starts) {
    JobTimeline job;
    job.ranks.resize(programs_.size());
    for (const RankStart& s : starts) job.start_ns.push_back(s.offset_ns);
    for (std::size_t r = 0; r < programs_.size(); ++r) {
      options_[r].stream_ready_ns = starts[r].backlog_ns;
      options_[r].collective_ready_ns.assign(programs_[r]->collectives.size(), 0);
    }
    for (bool moved = true; moved;) {
      ++job.rounds;
      MEMPLAN_CHECK(static_cast<std::size_t>(job.rounds) <= collectives_ + 1,
                    "the ready times settle within one round per collective (max-plus monotone)");
      for (std::size_t r = 0; r < programs_.size(); ++r) {
        job.ranks[r] = engines_[r].run(*programs_[r], machines_[r], options_[r]);
        if (!job.ranks[r].feasible) job.feasible = false;
      }
      if (!job.feasible) return job;
      moved = settle(job, starts);
    }
    for (std::size_t r = 0; r < job.ranks.size(); ++r) {
      const Nanoseconds end = add_ns(starts[r].offset_ns, job.ranks[r].iteration_ns);
      if (end > job.step_ns) {
        job.step_ns = end;
        job.slowest = r;
      }
    }
    return job;
  }

 private:
  /// Each call's ready time: its group's latest arrival in the job's time, in each rank's frame.
  bool settle(const JobTimeline& job, const std::vector<RankStart>& starts) {
    bool moved = false;
    for (const auto& [key, members] : calls_) {
      Nanoseconds ready = 0;
      for (const auto& [r, c] : members)
        ready =
            std::max(ready, add_ns(job.ranks[r].collectives[c].arrival_ns, starts[r].offset_ns));
      for (const auto& [r, c] : members) {
        Nanoseconds& at = options_[r].collective_ready_ns[c];
        const Nanoseconds own = ready - starts[r].offset_ns;
        if (at != own) {
          at = own;
          moved = true;
        }
      }
    }
    return moved;
  }

  const std::vector<const Program*>& programs_;
  const std::vector<Machine>& machines_;
  Calls calls_;
  std::vector<Engine> engines_;
  std::vector<EngineOptions> options_;
  std::size_t collectives_ = 0;
};

/// Each rank's start as the job recorded it (Distributed::step_start_ns), from the earliest; all
/// at 0 unless every rank has one.
std::vector<RankStart> recorded_starts(const Job& job) {
  std::vector<RankStart> starts(job.ranks.size());
  const bool known = std::all_of(job.ranks.begin(), job.ranks.end(), [](const Workload& w) {
    return w.distributed && w.distributed->step_start_ns;
  });
  if (!known || job.ranks.size() < 2) return starts;
  Nanoseconds first = *job.ranks.front().distributed->step_start_ns;
  for (const Workload& w : job.ranks) first = std::min(first, *w.distributed->step_start_ns);
  for (std::size_t r = 0; r < job.ranks.size(); ++r)
    starts[r].offset_ns = *job.ranks[r].distributed->step_start_ns - first;
  return starts;
}

/// The job's period back to back (Note [Step period] in sim/engine.hpp, for every rank at once):
/// each rank's next step starts where its host leaves this one (its device end without a host
/// side), its streams busy with what is left; the ranks stay coupled through their collectives. The
/// steps repeat until the ranks' relative starts and backlogs repeat; the period is then the
/// growth of the earliest start per step. Otherwise some device's backlog grows: a rank's
/// device, or a rank held at its collectives by a slower one, is the bottleneck while a host runs
/// ahead, and the period is the growth of the job's end (its latest stream's) per step, once it
/// repeats, else averaged over the steps run. (A host that runs ahead leaves earlier each step,
/// so the earliest start grows at that host's rate, not the job's.)
Nanoseconds job_period_ns(JointStep& joint, const JobTimeline& first, std::vector<RankStart> starts,
                          const std::vector<const Program*>& programs) {
  constexpr int kMaxSteps = 16;
  const JobTimeline* step = &first;
  JobTimeline next;
  Nanoseconds grown = 0;  // the earliest start of the step just run, from the first step's
  Nanoseconds first_end = 0;
  Nanoseconds end = 0;      // the job's end (its latest stream's) in the step just run
  Nanoseconds growth = -1;  // of the job's end over the step before
  for (int k = 1; k <= kMaxSteps; ++k) {
    Nanoseconds ends = 0;
    for (std::size_t r = 0; r < programs.size(); ++r) {
      const std::vector<Nanoseconds>& streams = step->ranks[r].stream_end_ns;
      const Nanoseconds latest =
          streams.empty() ? 0 : *std::max_element(streams.begin(), streams.end());
      ends = std::max(ends, add_ns(starts[r].offset_ns, latest));
    }
    const Nanoseconds previous_end = end;
    end = add_ns(grown, ends);
    if (k == 1) first_end = end;
    std::vector<RankStart> following(programs.size());
    for (std::size_t r = 0; r < programs.size(); ++r) {
      const Timeline& tl = step->ranks[r];
      const Nanoseconds leaves = programs[r]->host.active() ? tl.host_end_ns : tl.iteration_ns;
      following[r].offset_ns = add_ns(starts[r].offset_ns, leaves);
      following[r].backlog_ns.resize(tl.stream_end_ns.size());
      for (std::size_t s = 0; s < tl.stream_end_ns.size(); ++s)
        following[r].backlog_ns[s] = std::max<Nanoseconds>(0, tl.stream_end_ns[s] - leaves);
    }
    Nanoseconds base = following.front().offset_ns;
    for (const RankStart& f : following) base = std::min(base, f.offset_ns);
    for (RankStart& f : following) f.offset_ns -= base;
    grown = add_ns(grown, base);
    const bool same = std::equal(
        following.begin(), following.end(), starts.begin(),
        [](const RankStart& a, const RankStart& b) {
          return a.offset_ns == b.offset_ns &&
                 (a.backlog_ns == b.backlog_ns ||
                  (b.backlog_ns.empty() && std::all_of(a.backlog_ns.begin(), a.backlog_ns.end(),
                                                       [](Nanoseconds x) { return x == 0; })));
        });
    if (same) return base;  // the fixed point
    if (k >= 2 && end < kMaxNanoseconds) {
      // A backlog grows by the same every step, faster than the earliest start: that device's
      // rate is the job's.
      if (end - previous_end == growth && growth > base) return growth;
      growth = end - previous_end;
    }
    if (k == kMaxSteps) break;
    starts = std::move(following);
    next = joint.run(starts);
    if (!next.feasible) return 0;
    step = &next;
  }
  // Still moving: a backlog that grows every step (a device is the bottleneck); the period is
  // the growth of the job's end per step, averaged over the steps run.
  if (end >= kMaxNanoseconds) return kMaxNanoseconds;
  return std::max(grown / kMaxSteps, (end - first_end) / (kMaxSteps - 1));
}

}  // namespace

JobTimeline simulate_job(const std::vector<const Program*>& programs,
                         const std::vector<Machine>& machines, const EngineOptions& options) {
  JointStep joint(programs, machines, options);
  return joint.run(std::vector<RankStart>(programs.size()));
}

std::vector<Nanoseconds> peer_ready_ns(const std::vector<const Program*>& programs,
                                       const JobTimeline& timeline, std::size_t rank) {
  MEMPLAN_CHECK(
      rank < programs.size() && timeline.ranks.size() == programs.size() && timeline.feasible,
      "peer ready times are read from a feasible simulation of the same programs");
  std::vector<Nanoseconds> ready(programs[rank]->collectives.size(), 0);
  for (const auto& [key, members] : match_calls(programs)) {
    // In the job's time (each rank's arrival from its own start), then in `rank`'s frame.
    Nanoseconds latest = 0;
    std::size_t own = ready.size();
    for (const auto& [r, c] : members) {
      if (r == rank) {
        own = c;
      } else {
        latest = std::max(
            latest, add_ns(timeline.ranks[r].collectives[c].arrival_ns, timeline.start_ns[r]));
      }
    }
    if (own < ready.size()) ready[own] = std::max<Nanoseconds>(0, latest - timeline.start_ns[rank]);
  }
  // A plan's re-runs are its own: another plan of the rank re-runs others, their peers alike.
  ready.resize(programs[rank]->workload_collectives);
  return ready;
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
  const std::vector<RankStart> starts = recorded_starts(job);
  JointStep joint(programs, machines, options);
  run.timeline = joint.run(starts);
  if (!run.timeline.feasible) return run;
  EngineOptions totals = EngineOptions::totals();
  JointStep repeated(programs, machines, totals);
  run.period_ns = job_period_ns(repeated, run.timeline, starts, programs);
  for (Timeline& tl : run.timeline.ranks) tl.period_ns = run.period_ns;
  return run;
}

JobRun ideal_job_run(const Job& job, const std::vector<Machine>& machines) {
  std::vector<Machine> unlimited = machines;
  for (Machine& m : unlimited) m.memory_bytes = std::numeric_limits<Bytes>::max() / 4;
  std::vector<Plan> plans;
  plans.reserve(job.ranks.size());
  for (const Workload& w : job.ranks) plans.push_back(in_core_plan(w));
  return simulate_job(job, plans, unlimited, EngineOptions::totals());
}

}  // namespace memplan::sim
