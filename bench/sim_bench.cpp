// sim_bench: how fast the simulator is on the deepest network memplan targets — the zoo's
// 1517-layer residual network (Layrub's), batch 16 on a V100 cost model. Reports simulated
// instructions per second on one core and the time to lower and to simulate one plan, without and
// with a host side (the host stream an imported trace brings); then the oracle's ways of answering
// (search/oracle/evaluator.hpp): one swapped map kept, judged by a full lowering and simulation,
// by an allocation replay, and from the base plan's allocations (KeepCheck); one kept map evicted
// where memory runs out in the forward pass, judged by an allocation replay and from the base's
// forward allocations (EvictionCheck); and one swapped map recomputed, judged by a lowering and
// replay (and simulation) from the start and resumed where the backward pass starts.
//
// Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: on a shared machine a
// wall clock counts the time other processes hold the core, the CPU clock only this thread's.
// The wall time of the lean simulation is printed too, to see how busy the machine was.
//
//   sim_bench [depth] [repetitions] [batch]
#include <ctime>  // clock_gettime (POSIX, declared by time.h)

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/liveness.hpp"
#include "search/oracle/evaluator.hpp"
#include "sim/engine.hpp"
#include "sim/job_simulation.hpp"
#include "sim/lowering.hpp"
#include "zoo/zoo.hpp"

using namespace memplan::sim;

namespace {

// Swap every third map, recompute every third, keep the rest: every instruction kind at work.
Plan mixed_plan(const Workload& w) {
  Plan plan = in_core_plan(w);
  plan.policy = "mixed";
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    if (i % 3 == 0) plan.decisions[i].action = Action::kSwap;
    if (i % 3 == 1) plan.decisions[i].action = Action::kRecompute;
  }
  return plan;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

using Clock = std::chrono::steady_clock;
double wall_seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// The workload with a host side (trace format v2, Note [Host side] in
/// importers/kineto/step_host_side.cpp) as an imported trace has one: every op dispatched in 20 us,
/// every 50th op synchronizing after 5 us more, 5 us per launch that a plan adds. The engine then
/// walks its host stream too.
Workload with_host_side(Workload w) {
  for (Op& op : w.ops) {
    const bool sync = index(op.id) % 50 == 49;
    op.host =
        HostSide{.dispatch_ns = 20'000, .synchronizes = sync, .sync_after_ns = sync ? 5000 : 0};
  }
  w.launch_ns = 5000;
  w.host_tail_ns = 100'000;
  return w;
}

/// One row per plan: instructions, lowering and simulation times, simulated instructions per
/// second.
void bench(const Workload& w, const Machine& machine, int repetitions) {
  const EngineOptions full;
  EngineOptions lean;
  lean.record_spans = false;
  lean.record_memory = false;
  lean.record_stalls = false;
  Engine engine;
  fmt::print("{:<14} {:>8} {:>10} {:>12} {:>14} {:>14} {:>10} {:>10}\n", "plan", "instr",
             "lower ms", "simulate ms", "Minstr/s lean", "Minstr/s full", "wall ms", "feasible");
  for (const Plan& plan :
       {in_core_plan(w), swap_all_plan(w), recompute_all_plan(w), mixed_plan(w)}) {
    Lowerer lowerer(w);  // once per workload, as a search would
    Program program;
    lowerer.lower(plan, program);  // warm the buffers
    double c0 = cpu_seconds();
    for (int r = 0; r < repetitions; ++r) lowerer.lower(plan, program);
    const double lower_s = (cpu_seconds() - c0) / repetitions;
    engine.run(program, machine, lean);  // warm the buffers
    const auto wall0 = Clock::now();
    c0 = cpu_seconds();
    bool feasible = true;
    std::size_t executed = 0;
    for (int r = 0; r < repetitions; ++r) {
      const Timeline& tl = engine.run(program, machine, lean);
      feasible = tl.feasible;
      executed += tl.instructions_executed;
    }
    const double lean_s = cpu_seconds() - c0;
    const double lean_wall_s = wall_seconds_since(wall0);
    c0 = cpu_seconds();
    std::size_t executed_full = 0;
    for (int r = 0; r < repetitions; ++r)
      executed_full += engine.run(program, machine, full).instructions_executed;
    const double full_s = cpu_seconds() - c0;
    fmt::print("{:<14} {:>8} {:>10.3f} {:>12.3f} {:>14.1f} {:>14.1f} {:>10.3f} {:>10}\n",
               plan.policy, program.instruction_count(), lower_s * 1e3, lean_s / repetitions * 1e3,
               static_cast<double>(executed) / lean_s / 1e6,
               static_cast<double>(executed_full) / full_s / 1e6, lean_wall_s / repetitions * 1e3,
               feasible ? "yes" : "no (oom)");
  }
}

/// `trials` plans, each `base` with one map recomputed instead (a plain recompute), the maps spread
/// over the step.
std::vector<Plan> one_map_recomputed(const Plan& base, int trials) {
  std::vector<Plan> plans;
  plans.reserve(static_cast<std::size_t>(trials));
  for (int k = 0; k < trials; ++k) {
    Plan plan = base;
    const auto m =
        plan.decisions.size() * static_cast<std::size_t>(k) / static_cast<std::size_t>(trials);
    plan.decisions[m] = {plan.decisions[m].tensor, Action::kRecompute};
    plans.push_back(std::move(plan));
  }
  return plans;
}

/// The change a search makes most (issue #22): one swapped map of swap-all kept instead, judged
/// three ways on the same trials (maps spread over the step): a full lowering and simulation
/// (Evaluator::cost with no base: time and fit), a lowering and an allocation replay
/// (Evaluator::fits with no base), and fits with swap-all as the base (its allocations with the
/// change edited in: KeepCheck).
void single_map_change(const Workload& w, const Machine& machine, int trials) {
  const Plan base = swap_all_plan(w);
  std::vector<int> maps;
  maps.reserve(static_cast<std::size_t>(trials));
  for (int k = 0; k < trials; ++k) {
    maps.push_back(static_cast<int>(base.decisions.size() * static_cast<std::size_t>(k) /
                                    static_cast<std::size_t>(trials)));
  }
  const auto changed = [&](int m) {
    Plan plan = base;
    plan.decisions[static_cast<std::size_t>(m)] = {
        plan.decisions[static_cast<std::size_t>(m)].tensor, Action::kKeep};
    return plan;
  };
  memplan::search::Evaluator evaluator(w, machine);
  double c0 = cpu_seconds();
  std::size_t fit_full = 0;
  for (int m : maps) fit_full += evaluator.cost(changed(m)).feasible ? 1 : 0;
  const double full_s = (cpu_seconds() - c0) / trials;
  c0 = cpu_seconds();
  std::size_t fit_replay = 0;
  for (int m : maps) fit_replay += evaluator.fits(changed(m)).feasible ? 1 : 0;
  const double replay_s = (cpu_seconds() - c0) / trials;
  memplan::search::Evaluator based(w, machine);
  based.rebase(base);
  (void)based.fits(changed(maps.front()));  // makes the base's KeepCheck
  c0 = cpu_seconds();
  std::size_t fit_keep = 0;
  for (int m : maps) fit_keep += based.fits(changed(m)).feasible ? 1 : 0;
  const double keep_s = (cpu_seconds() - c0) / trials;
  fmt::print(
      "\none swapped map of swap-all kept, {} trials (fitting: {} / {} / {}; by KeepCheck: {}):\n"
      "  lowering + simulation   {:8.3f} ms\n  lowering + alloc replay {:8.3f} ms\n"
      "  from the base's allocs  {:8.3f} ms\n",
      trials, fit_full, fit_replay, fit_keep, based.ways().keep_check, full_s * 1e3, replay_s * 1e3,
      keep_s * 1e3);
}

// One kept map of the in-core plan evicted (recomputed) on a device a third of the in-core peak,
// where the plan runs out in the forward pass: judged by a lowering and allocation replay, and
// from the in-core plan's forward allocations (EvictionCheck; DTR's and SuperNeurons' feedback
// loops ask this after each batch).
void single_eviction(const Workload& w, Machine machine, int trials) {
  machine.memory_bytes = incore_peak(w).bytes / 3;
  const Plan base = in_core_plan(w);
  const std::vector<Plan> plans = one_map_recomputed(base, trials);
  memplan::search::Evaluator evaluator(w, machine);
  double c0 = cpu_seconds();
  std::vector<OpId> lowered;
  lowered.reserve(plans.size());
  for (const Plan& plan : plans) lowered.push_back(evaluator.fits(plan).oom_op);
  const double replay_s = (cpu_seconds() - c0) / trials;
  memplan::search::Evaluator based(w, machine);
  based.rebase(base);
  (void)based.fits(plans.front());  // makes the base's EvictionCheck
  c0 = cpu_seconds();
  std::size_t same = 0;
  for (std::size_t k = 0; k < plans.size(); ++k) same += based.fits(plans[k]).oom_op == lowered[k];
  const double eviction_s = (cpu_seconds() - c0) / trials;
  fmt::print(
      "\none kept map of in-core evicted, in a third of the in-core peak, {} trials (the same "
      "out-of-memory op: {}; by EvictionCheck: {}):\n"
      "  lowering + alloc replay {:8.3f} ms\n  from the base's allocs  {:8.3f} ms\n",
      trials, same, based.ways().eviction_check, replay_s * 1e3, eviction_s * 1e3);
}

// One swapped map of swap-all recomputed instead (PoocH's step 3 makes this change): judged by a
// lowering and allocation replay, a lowering and simulation when it fits, and both resumed from
// swap-all's checkpoint where the backward pass starts (Note [Resuming a memory check]).
void single_recompute(const Workload& w, const Machine& machine, int trials) {
  const Plan base = swap_all_plan(w);
  const std::vector<Plan> plans = one_map_recomputed(base, trials);
  // The timeline of a plan that fits: fits() first, then timeline() on the same lowering.
  const auto simulate_if_fits = [](memplan::search::Evaluator& ev, const Plan& plan) {
    if (ev.fits(plan).feasible) (void)ev.timeline(plan);
  };
  memplan::search::Evaluator evaluator(w, machine);
  double c0 = cpu_seconds();
  std::size_t fit_full = 0;
  for (const Plan& plan : plans) fit_full += evaluator.fits(plan).feasible ? 1 : 0;
  const double replay_s = (cpu_seconds() - c0) / trials;
  c0 = cpu_seconds();
  for (const Plan& plan : plans) simulate_if_fits(evaluator, plan);
  const double simulate_s = (cpu_seconds() - c0) / trials;
  memplan::search::Evaluator based(w, machine);
  based.rebase(base);
  (void)based.fits(plans.front());  // makes the base's checkpoint
  c0 = cpu_seconds();
  std::size_t fit_resumed = 0;
  for (const Plan& plan : plans) fit_resumed += based.fits(plan).feasible ? 1 : 0;
  const double resumed_replay_s = (cpu_seconds() - c0) / trials;
  c0 = cpu_seconds();
  for (const Plan& plan : plans) simulate_if_fits(based, plan);
  const double resumed_simulate_s = (cpu_seconds() - c0) / trials;
  fmt::print(
      "\none swapped map of swap-all recomputed, {} trials (fitting: {} / {}; replays resumed: "
      "{}):\n"
      "                                  from the start   resumed at the backward pass\n"
      "  lowering + alloc replay           {:8.3f} ms        {:8.3f} ms\n"
      "  the same + simulation if it fits  {:8.3f} ms        {:8.3f} ms\n",
      trials, fit_full, fit_resumed, based.ways().resumed_replay, replay_s * 1e3,
      resumed_replay_s * 1e3, simulate_s * 1e3, resumed_simulate_s * 1e3);
}

/// Rank `rank` of an 8-rank data-parallel step of `w` as DDP runs it: every backward op that
/// writes a gradient the optimizer reads is followed by an all-reduce of it on an NCCL stream,
/// the update waits for them all, and each rank's compute is `rank` per mille slower than rank
/// 0's (so that ranks wait for each other).
Workload ddp_rank(const Workload& w, std::int32_t rank, std::int32_t world_size) {
  Workload out = w;
  out.ops.clear();
  out.streams = {"compute", "nccl"};
  out.distributed = Distributed{"nccl", rank, world_size, std::nullopt, std::nullopt};
  std::vector<bool> updated(w.tensors.size(), false);  // gradients the optimizer reads
  for (const Op& op : w.ops) {
    if (op.phase != Phase::kUpdate) continue;
    for (TensorId t : op.inputs) updated[index(t)] = w.tensor(t).kind == TensorKind::kGradient;
  }
  std::vector<OpId> renamed(w.ops.size());
  std::vector<OpId> all_reduces;
  std::int64_t sequence = 0;
  for (const Op& original : w.ops) {
    Op op = original;
    op.id = op_id(out.ops.size());
    renamed[index(original.id)] = op.id;
    op.duration_ns += op.duration_ns * rank / 1000;
    if (op.differentiates != kNoOp) op.differentiates = renamed[index(op.differentiates)];
    if (op.phase == Phase::kUpdate) op.after = all_reduces;
    out.ops.push_back(op);
    for (TensorId t : original.outputs) out.tensors[index(t)].producer = op.id;
    if (op.phase != Phase::kBackward) continue;
    for (TensorId t : original.outputs) {
      if (!updated[index(t)]) continue;
      Op ar;
      ar.id = op_id(out.ops.size());
      ar.name = "all_reduce " + w.tensor(t).name;
      ar.layer = LayerType::named("all_reduce");
      ar.phase = Phase::kBackward;
      ar.inputs = {t};
      ar.stream = 1;
      ar.duration_ns = 1000 + w.tensor(t).bytes / 100;  // 100 GB/s and 1 us
      ar.collective = Collective{CollectiveKind::kAllReduce,
                                 w.tensor(t).bytes,
                                 w.tensor(t).bytes,
                                 "float32",
                                 "0",
                                 {},
                                 -1,
                                 sequence++};
      all_reduces.push_back(ar.id);
      out.ops.push_back(std::move(ar));
    }
  }
  return out;
}

/// The 8 ranks of a DDP step of `w` simulated together: instructions per second over every rank's
/// engine runs, and the rounds the collectives' ready times took.
void bench_job(const Workload& w, const Machine& machine, int repetitions) {
  constexpr std::int32_t kRanks = 8;
  Job job;
  for (std::int32_t r = 0; r < kRanks; ++r) job.ranks.push_back(ddp_rank(w, r, kRanks));
  validate(job, "8-rank DDP step");
  const std::vector<Plan> plans(kRanks, in_core_plan(job.ranks.front()));
  const std::vector<Machine> machines(kRanks, machine);
  std::vector<Program> programs;
  programs.reserve(kRanks);
  for (std::int32_t r = 0; r < kRanks; ++r) programs.push_back(lower(job.ranks[r], plans[r]));
  std::vector<const Program*> pointers;
  pointers.reserve(programs.size());
  for (const Program& p : programs) pointers.push_back(&p);
  const EngineOptions lean = EngineOptions::totals();
  JobTimeline tl = simulate_job(pointers, machines, lean);  // warm
  const double c0 = cpu_seconds();
  std::size_t executed = 0;
  for (int k = 0; k < repetitions; ++k) {
    tl = simulate_job(pointers, machines, lean);
    for (const Timeline& rank : tl.ranks) executed += rank.instructions_executed * tl.rounds;
  }
  const double s = cpu_seconds() - c0;
  fmt::print(
      "\n8-rank DDP step ({} collectives per rank on an NCCL stream): {} instructions per rank, "
      "{} rounds, {:.3f} ms per job step, {:.1f} Minstr/s over every rank's runs; step {:.3f} ms, "
      "slowest rank {}\n",
      programs.front().collectives.size(), programs.front().instruction_count(), tl.rounds,
      s / repetitions * 1e3, static_cast<double>(executed) / s / 1e6,
      static_cast<double>(tl.step_ns) / 1e6, tl.slowest);
}

}  // namespace

int main(int argc, char** argv) {
  const int depth = argc > 1 ? std::atoi(argv[1]) : 1517;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 200;
  memplan::zoo::ZooRequest request{"resnet", "v100-16gb", {}};
  request.options.depth = depth;
  request.options.batch = argc > 3 ? std::atoi(argv[3]) : 16;
  const Workload w = memplan::zoo::make_workload(request);
  const Bytes peak = incore_peak(w).bytes;
  fmt::print("resnet --depth {} --batch {}: {} ops, {} tensors, {} feature maps, in-core peak {}\n",
             depth, request.options.batch, w.ops.size(), w.tensors.size(),
             find_feature_maps(w).size(), format_bytes(peak));
  Machine machine;
  machine.memory_bytes = peak * 2;  // room for every plan, so each runs to the end
  machine.link.latency_ns = 10'000;
  bench(w, machine, repetitions);
  fmt::print("\nwith a host side (20 us dispatch per op, every 50th op synchronizing):\n");
  bench(with_host_side(w), machine, repetitions);
  single_map_change(w, machine, 40);
  single_eviction(w, machine, 40);
  single_recompute(w, machine, 40);
  bench_job(w, machine, std::max(1, repetitions / 20));
  return 0;
}
