// Note [A job's lower bound]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A job's plans give each rank a plan (one shared, or each its own), and sim::simulate_job runs
// the ranks together, each from the start the job recorded for it (start_r: the same whatever the
// plans), a collective starting at the last arrival of its group. Rank r among its peers runs its
// Program with each collective's ready time at its peers' latest arrival; alone, each starts on
// arrival. A ready time only delays what follows it (the engine is a max-plus system, monotone in
// its start times: Note [Lower bound on a plan's time], fact 2), so under the same plan every
// event of rank r in the job is no earlier than alone, and its step no shorter than alone, which
// is at least its bound B_r (lower_bound, over every plan that fits its device). The job's step
// alone ends with its last rank: it is at least start_r + B_r for every rank.
// Back to back, each rank's next step starts where its host leaves the step before (where its
// device work ends, without a host side), the ranks coupled by their collectives; by the same
// monotonicity each rank's k-th start is no earlier than the rank's own k-th start repeated
// alone, so the job's period, every rank's rate, is at least each rank's period alone, which its
// bound back to back bounds (its bound alone, without a host side). So the job's bounds are the
// largest of its ranks', and those of any subset of its ranks hold too (kMaxBoundedRanks).
// The job in core (sim::ideal_job_run), its waits for peers included, is a floor of every plan
// in which each rank updates on the device: that adds to each rank's in-core program. A plan that
// updates some rank's step on the host takes that update off its compute stream and may beat the
// job in core, but is no faster than that rank's bound over the plans that update on the host
// (LowerBound::host_update_bound_ns, from its start; back to back its host_update_period_bound_ns).
// So the least of the job in core and those is a floor too, the job in core itself where no rank
// may update on the host (BoundOptions::host_placement off). Left out: what a rank waits for its
// peers beyond that (each rank's bound is of the rank alone).
// Splitting the plans by where each rank updates gains nothing: with D_r and H_r rank r's bounds
// over its device and host updates, B_r = min(D_r, H_r), A = max_r B_r, H = min_r H_r and I the
// job in core, the split's floor min(max(I, max_r D_r), max(A, H)) is max(A, min(I, H)), this
// one: where H <= A both are A; where H > A every B_r is D_r, so max_r D_r = A.
#include "search/bound/job_bound.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include <fmt/core.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/check.hpp"

namespace memplan::search {

BoundedStep bounded_job_step(const sim::JobRun& run) {
  return {run.timeline.feasible, run.timeline.step_ns, run.period_ns};
}

JobLowerBound job_lower_bound(const sim::Job& job, const std::vector<sim::Machine>& machines,
                              const BoundOptions& options) {
  MEMPLAN_CHECK(machines.size() == job.ranks.size() && !job.ranks.empty(),
                "one machine per rank of a job");
  const auto start = std::chrono::steady_clock::now();
  const sim::JobRun ideal = sim::ideal_job_run(job, machines);
  const auto start_of = [&](std::size_t r) -> sim::Nanoseconds {
    return r < ideal.timeline.start_ns.size() ? ideal.timeline.start_ns[r] : 0;
  };
  const auto ideal_end = [&](std::size_t r) -> sim::Nanoseconds {
    return ideal.timeline.feasible ? sim::add_ns(start_of(r), ideal.timeline.ranks[r].iteration_ns)
                                   : 0;
  };
  JobLowerBound out;
  out.bounded.resize(job.ranks.size());
  std::iota(out.bounded.begin(), out.bounded.end(), std::size_t{0});
  std::stable_sort(out.bounded.begin(), out.bounded.end(),
                   [&](std::size_t a, std::size_t b) { return ideal_end(a) > ideal_end(b); });
  out.bounded.resize(std::min(out.bounded.size(), kMaxBoundedRanks));
  std::sort(out.bounded.begin(), out.bounded.end());
  out.ranks.resize(out.bounded.size());
  tbb::parallel_for(std::size_t{0}, out.bounded.size(), [&](std::size_t i) {
    const std::size_t r = out.bounded[i];
    out.ranks[i] = lower_bound(job.ranks[r], machines[r], options);
  });

  LowerBound& b = out.job;
  b.ideal_ns = ideal.timeline.step_ns;
  b.ideal_period_ns = ideal.period_ns;
  // Every plan that fits is no faster than any rank's bound (alone, from the rank's start).
  std::size_t alone_setter = 0;
  std::size_t period_setter = 0;
  sim::Nanoseconds period = 0;
  // And either every rank updates on the device, a superset of the job in core, or some rank on
  // the host, no faster than its bound there: the least of those is a floor too.
  sim::Nanoseconds host_alone = sim::kMaxNanoseconds;
  sim::Nanoseconds host_period = sim::kMaxNanoseconds;
  for (std::size_t i = 0; i < out.ranks.size(); ++i) {
    const LowerBound& rank = out.ranks[i];
    const sim::Nanoseconds from = start_of(out.bounded[i]);
    b.fits = b.fits && rank.fits;
    b.points += rank.points;
    b.columns += rank.columns;
    b.rows += rank.rows;
    b.optimal = b.optimal && rank.optimal;
    if (sim::add_ns(from, rank.bound_ns) > b.bound_ns) {
      b.bound_ns = sim::add_ns(from, rank.bound_ns);
      alone_setter = i;
    }
    if (rank.ranked_bound_ns() > period) {
      period = rank.ranked_bound_ns();
      period_setter = i;
    }
    if (rank.host_update_bound_ns)
      host_alone = std::min(host_alone, sim::add_ns(from, *rank.host_update_bound_ns));
    const auto host_ranked =
        rank.period_bound_ns ? rank.host_update_period_bound_ns : rank.host_update_bound_ns;
    if (host_ranked) host_period = std::min(host_period, *host_ranked);
  }
  // What sets each bound, as the rank that sets it says (LowerBound's fields).
  const LowerBound& alone = out.ranks[alone_setter];
  b.host_update = alone.host_update;
  b.update_waits_for = alone.update_waits_for;
  const LowerBound& ranked = out.ranks[period_setter];
  b.period_floor = ranked.period_bound_ns ? ranked.period_floor : LowerBound::PeriodFloor::kMemory;
  b.waited_op = ranked.waited_op;
  out.setting_rank = out.bounded[period_setter];
  if (ideal.timeline.feasible) {
    b.bound_ns = std::max(b.bound_ns, std::min(ideal.timeline.step_ns, host_alone));
    // Under the job in core only plans that update some rank on the host may be.
    b.host_update = b.host_update || b.bound_ns < ideal.timeline.step_ns;
    const sim::Nanoseconds in_core = std::min(ideal.period_ns, host_period);
    if (in_core > period) {
      period = in_core;
      b.period_floor = LowerBound::PeriodFloor::kIdealRun;
      out.setting_rank.reset();
    }
  }
  b.period_bound_ns = period;
  b.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

nlohmann::json setting_rank_json(const JobLowerBound& bound, const sim::Job& job) {
  return bound.setting_rank ? nlohmann::json(job.rank_of(*bound.setting_rank))
                            : nlohmann::json(nullptr);
}

std::string job_bound_text(const JobLowerBound& bound, const sim::Job& job,
                           const BoundedStep& step) {
  std::string out = bound_text(bound.job, step);
  if (!bound.job.fits) return out;
  const std::string who = bound.setting_rank
                              ? fmt::format("rank {}'s own", job.rank_of(*bound.setting_rank))
                              : std::string("the job in core");
  return out + fmt::format("lower bound set by {} ({} of {} ranks bounded, each alone)\n", who,
                           bound.bounded.size(), job.ranks.size());
}

}  // namespace memplan::search
