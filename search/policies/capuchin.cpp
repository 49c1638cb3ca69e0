// Capuchin (Peng et al., ASPLOS 2020): tensor-access-driven swap and recompute.
//
// Note [Capuchin in a plan]
// Capuchin measures, on one in-core iteration, each tensor's free time (FT: from the end of its
// last forward access to the start of its first backward access) and, for recomputation, its
// memory saving per second (MSPS: bytes freed / time to regenerate). It then picks tensors until
// the memory to save (in-core peak minus capacity) is covered: swap first, for the candidates
// whose FT can hide a round trip over the link (largest FT first); then recompute, for the
// others, highest MSPS first. memplan reads FT from the in-core schedule and regeneration time from
// the producer's duration, then simulates; while the plan still does not fit it takes the next
// candidate (swap where it would hide, recompute otherwise), as Capuchin's feedback pass does.
// The feedback pass takes candidates in batches: when memory runs out with B bytes missing, it
// takes the next candidates until their bytes add up to B, then simulates again (one simulation
// per candidate would be quadratic in the number of maps). APPROXIMATION: the same candidates as
// one at a time whenever taking candidates lowers what the failing op misses by at most their
// bytes; the arena's coalescing (a freed block joining free neighbours) or a moved timeline can
// make a plan with fewer of them fit, and then the batch has taken a few more than needed.
// The link is shared: Capuchin hides a swap behind the compute that runs while it is away, and
// the copies of all swapped maps queue on one link each way, so a swap whose round trip fits its
// own free time does not hide once the copy-outs already taken fill the forward pass (or the
// copy-ins the backward pass). Judged one map at a time, the imported ResNet-50 step on PCIe 3
// swapped 1 GB over a 33 ms forward pass (64 ms of copies each way). Candidates whose swap is
// judged not to hide on the shared link are recompute candidates, ranked by MSPS like the rest.
// Capuchin's swaps are timed by triggers, not by layers: the in-trigger of a swap-in is the tensor
// access from which the copy, at its measured speed, lands just before the map's first backward
// use, and a swapped-out map's memory goes once its copy-out is done. In a plan these are the
// prefetch point (place_in_triggers: the latest op from which the copy-ins, queued on one link in
// the order they are needed, all land in time in the in-core schedule) and the release point
// (place_releases, Note [Release point] in core/plan.hpp); each is taken when the step then fits
// and is faster.
// A map whose first backward use is the op right after its last forward use (the loss's input)
// is no candidate: nothing runs while it would be away, so evicting it saves no memory (Capuchin
// picks tensors for the memory they free at the peak; such a map is back before anything else
// is allocated).
#include <algorithm>
#include <limits>

#include <fmt/core.h>

#include "core/liveness.hpp"
#include "search/policies/policy.hpp"
#include "search/policies/schedule.hpp"

namespace memplan::search {

namespace {

// The swaps share one link each way (Note [Capuchin in a plan]): taken by free time, a swap
// still hides only while the copy-outs taken so far, its own included, fit in the forward pass's
// compute and the copy-ins in the backward pass's; past that it is a recompute candidate.
void share_the_link(const sim::Workload& w, const sim::Machine& machine, const NetworkView& view,
                    std::vector<CapuchinCandidate>& candidates) {
  sim::Nanoseconds forward_ns = 0;
  sim::Nanoseconds backward_ns = 0;
  for (const sim::Op& op : w.ops)
    (op.phase == sim::Phase::kForward ? forward_ns : backward_ns) += op.duration_ns;
  std::vector<std::size_t> swaps;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].hides) swaps.push_back(i);
  std::stable_sort(swaps.begin(), swaps.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].free_ns > candidates[b].free_ns;
  });
  sim::Nanoseconds out_ns = 0;
  sim::Nanoseconds in_ns = 0;
  for (std::size_t i : swaps) {
    const sim::Bytes bytes = view.map_bytes(candidates[i].map);
    out_ns += machine.d2h_copy_ns(bytes);
    in_ns += machine.h2d_copy_ns(bytes);
    if (out_ns > forward_ns || in_ns > backward_ns) candidates[i].hides = false;
  }
}

// Capuchin's in-triggers (Note [Capuchin in a plan]): from the last map needed to the first, each
// copy-in ends by its first backward use and before the next copy-in on the link starts; its
// prefetch point is the latest op that starts by then, after the map's last forward use.
void place_in_triggers(sim::Plan& plan, const NetworkView& view, const sim::Machine& machine) {
  const sim::Workload& w = view.workload();
  const InCoreSchedule schedule = in_core_schedule(w);
  std::vector<int> swapped = swapped_maps(plan);
  auto first_backward = [&](int m) {
    return view.feature_maps()[static_cast<std::size_t>(m)].backward_uses.front();
  };
  std::stable_sort(swapped.begin(), swapped.end(),
                   [&](int a, int b) { return first_backward(a) > first_backward(b); });
  sim::Nanoseconds link_free_until = std::numeric_limits<sim::Nanoseconds>::max();
  for (int m : swapped) {
    const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(m)];
    const sim::Nanoseconds end =
        std::min(link_free_until, schedule.start_ns[sim::index(first_backward(m))]);
    const sim::Nanoseconds start = end - machine.h2d_copy_ns(view.map_bytes(m));
    link_free_until = start;
    const sim::OpId earliest = sim::last_forward_use(fm, w) + 1;
    sim::OpId at = sim::default_prefetch_point(fm, w);
    while (at > earliest && schedule.start_ns[sim::index(at)] > start) --at;
    plan.decisions[static_cast<std::size_t>(m)].prefetch_before =
        at == sim::default_prefetch_point(fm, w) ? sim::kNoOp : at;
  }
}

}  // namespace

std::vector<CapuchinCandidate> capuchin_candidates(const NetworkView& view,
                                                   const sim::Machine& machine) {
  const sim::Workload& w = view.workload();
  const InCoreSchedule schedule = in_core_schedule(w);
  std::vector<CapuchinCandidate> candidates;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    const int map = static_cast<int>(m);
    const sim::FeatureMap& fm = view.feature_maps()[m];
    const sim::OpId last_forward =
        fm.forward_uses.empty() ? view.producer(map) : fm.forward_uses.back();
    // Read again by the very next op: evicting it frees nothing while anything else runs.
    if (fm.backward_uses.front() == last_forward + 1) continue;
    const sim::Nanoseconds ft = free_time(view, schedule, map);
    const sim::Nanoseconds regen =
        std::max<sim::Nanoseconds>(1, w.op(view.producer(map)).duration_ns);
    candidates.push_back({map, ft >= swap_round_trip_ns(view, machine, map), ft,
                          static_cast<double>(view.map_bytes(map)) / static_cast<double>(regen)});
  }
  share_the_link(w, machine, view, candidates);
  // Swaps that hide, by free time; then the rest, by memory saved per second of recompute.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const CapuchinCandidate& a, const CapuchinCandidate& b) {
                     if (a.hides != b.hides) return a.hides;
                     return a.hides ? a.free_ns > b.free_ns : a.msps > b.msps;
                   });
  return candidates;
}

PolicyDecision decide_capuchin(Evaluator& evaluator, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  const sim::Machine& machine = evaluator.machine();
  sim::Plan plan = keep_all(view, "capuchin");
  const std::vector<CapuchinCandidate> candidates = capuchin_candidates(view, machine);
  const sim::Bytes to_save = sim::incore_peak(w).bytes - machine.memory_bytes;
  sim::Bytes saved = 0;
  std::size_t next = 0;
  auto take = [&] {
    const CapuchinCandidate& c = candidates[next++];
    plan.decisions[static_cast<std::size_t>(c.map)].action =
        c.hides ? sim::Action::kSwap : sim::Action::kRecompute;
    saved += view.map_bytes(c.map);
  };
  while (next < candidates.size() && saved < to_save) take();
  // The feedback pass, a batch of candidates per simulation (Note [Capuchin in a plan]).
  while (next < candidates.size()) {
    // Only where memory runs out is read (Evaluator::fits).
    const Evaluation e = evaluator.fits(plan);
    if (e.feasible) break;
    const sim::Bytes batch_end = saved + std::max<sim::Bytes>(1, e.oom_bytes_missing);
    while (next < candidates.size() && saved < batch_end) take();
  }
  sim::Plan triggered = plan;
  place_in_triggers(triggered, view, machine);
  const bool timed = adopt_if_faster(evaluator, plan, std::move(triggered));
  const bool deferred = defer_releases(evaluator, view, plan);
  const auto counts = plan.action_counts();
  std::string note =
      fmt::format("{} swapped (free time hides them), {} recomputed by MSPS", counts[1], counts[2]);
  if (timed) note += "; swap-ins by in-trigger";
  if (deferred) note += "; frees after copy-outs";
  return {std::move(plan), false, std::move(note)};
}

}  // namespace memplan::search
