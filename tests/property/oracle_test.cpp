// Property tests of the search oracle on random graphs (tests/property/random_graphs.hpp): a
// lowering resumed where the backward pass starts against lower(), and every answer of the
// Evaluator (fits, cost, timeline), found through a base plan in whichever way applies (Note [One
// oracle] in search/oracle/evaluator.cpp), against a lowering and an engine run of the plan. A
// way of answering that disagrees with the full lowering fails here.
#include <algorithm>
#include <optional>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/oracle/resumed_lowering.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "tests/property/random_graphs.hpp"

using namespace memplan::sim;
using namespace memplan::test;

namespace {

bool same_instructions(const std::vector<Instruction>& a, const std::vector<Instruction>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Instruction& x, const Instruction& y) {
                      return x.kind == y.kind && x.op == y.op && x.buffer == y.buffer &&
                             x.aux == y.aux && x.operands_begin == y.operands_begin &&
                             x.operand_count == y.operand_count && x.duration_ns == y.duration_ns;
                    });
}

void require_same_program(const Program& a, const Program& b) {
  REQUIRE(a.streams.size() == b.streams.size());
  for (std::size_t s = 0; s < a.streams.size(); ++s)
    REQUIRE(same_instructions(a.streams[s], b.streams[s]));
  REQUIRE(a.operands == b.operands);
  REQUIRE(a.buffers.size() == b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    REQUIRE(a.buffers[i].bytes == b.buffers[i].bytes);
    REQUIRE(a.buffers[i].tensor == b.buffers[i].tensor);
    REQUIRE(a.buffers[i].role == b.buffers[i].role);
    REQUIRE(a.buffers[i].initial == b.buffers[i].initial);
  }
  REQUIRE(a.events.size() == b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    REQUIRE(a.events[i].cause == b.events[i].cause);
    REQUIRE(a.events[i].tensor == b.events[i].tensor);
  }
  REQUIRE(a.host_slots.size() == b.host_slots.size());
  for (std::size_t i = 0; i < a.host_slots.size(); ++i) {
    REQUIRE(a.host_slots[i].tensor == b.host_slots[i].tensor);
    REQUIRE(a.host_slots[i].bytes == b.host_slots[i].bytes);
    REQUIRE(a.host_slots[i].resident == b.host_slots[i].resident);
  }
  REQUIRE(a.op_compute_ns == b.op_compute_ns);
  REQUIRE(a.action_counts == b.action_counts);
  REQUIRE(a.host.dispatch_at == b.host.dispatch_at);
}

// The compute stream's allocations and frees as a device memory sees them: each allocation (its
// buffer, op and size) and, between two allocations, the set of buffers freed.
std::vector<std::int64_t> memory_calls(const Program& p) {
  std::vector<std::int64_t> calls;
  std::vector<std::int64_t> frees;
  auto flush = [&] {
    std::sort(frees.begin(), frees.end());
    calls.push_back(-1);
    calls.insert(calls.end(), frees.begin(), frees.end());
    frees.clear();
  };
  for (const Instruction& in : p.stream(StreamId::kCompute)) {
    if (in.kind == InstrKind::kFree) frees.push_back(value(in.buffer));
    if (in.kind != InstrKind::kAlloc) continue;
    flush();
    calls.push_back(value(in.buffer));
    calls.push_back(value(in.op));
    calls.push_back(p.buffers[index(in.buffer)].bytes);
  }
  flush();
  return calls;
}

// Two Programs that run alike (ResumableLowerer::Resumable::kEquivalent): the same allocations
// and frees as a device memory sees them, the same times, stalls and peaks.
void require_same_run(const Program& got_program, const Program& want_program, const Machine& m) {
  REQUIRE(memory_calls(got_program) == memory_calls(want_program));
  Engine engine;
  const Timeline got = engine.run(got_program, m);
  const Timeline& want = engine.run(want_program, m);
  REQUIRE(got.feasible == want.feasible);
  REQUIRE(got.iteration_ns == want.iteration_ns);
  REQUIRE(got.peak_bytes == want.peak_bytes);
  REQUIRE(got.peak_reserved_bytes == want.peak_reserved_bytes);
  REQUIRE(got.stall_ns_by_cause == want.stall_ns_by_cause);
  REQUIRE(got.compute_busy_ns == want.compute_busy_ns);
}

// A plan that differs from `base` in a few maps: a swap recomputed, a swap's prefetch moved, a
// recompute's per-use mode flipped, or any other action.
Plan changed_plan(const Workload& w, const Plan& base, Rng& rng) {
  Plan plan = base;
  const auto maps = find_feature_maps(w);
  const auto changes = uniform(rng, 1, 3);
  for (std::int64_t c = 0; c < changes; ++c) {
    const auto i =
        static_cast<std::size_t>(uniform(rng, 0, static_cast<std::int64_t>(maps.size()) - 1));
    Decision& d = plan.decisions[i];
    const std::int64_t kind = uniform(rng, 0, 3);
    if (kind == 0 && d.action == Action::kSwap) {
      d = Decision{d.tensor, Action::kRecompute};
    } else if (kind == 1 && d.action == Action::kSwap) {
      d.release_before = kNoOp;
      d.prefetch_before = op_id(uniform(rng, value(last_forward_use(maps[i], w)) + 1,
                                        value(maps[i].backward_uses.front())));
    } else if (kind == 2 && d.action == Action::kRecompute) {
      d.per_use = !d.per_use;
    } else if (kind == 3) {
      d = Decision{d.tensor, static_cast<Action>(uniform(rng, 0, 2))};
    }
  }
  return plan;
}

}  // namespace

TEST_CASE("a lowering resumed where the backward pass starts is lower()'s", "[property]") {
  // Note [Resuming a lowering] in search/oracle/resumed_lowering.cpp: random graphs and plans, a
  // checkpoint of each plan's lowering, then plans changed in a few maps resumed from it on another
  // Lowerer, one after another into one Program (Note [Rewinding a resumed lowering]), with a full
  // lowering on that Lowerer and into that Program between two of them.
  constexpr int kCases = 500;
  int exact = 0;
  int equivalent = 0;
  int refused = 0;
  int same_prefix = 0;
  int other_prefix = 0;
  std::size_t rewinds = 0;
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed) + 7919);
    Workload w = random_workload(rng);
    Plan base = random_plan(w, rng);
    // Half the workloads with a host side (each op dispatched by the host: the Program keeps
    // where each op's instructions start).
    if (uniform(rng, 0, 1) == 0) w.launch_ns = uniform(rng, 1, 3000);
    if (uniform(rng, 0, 1) == 0) {  // half the plans without encodes
      for (Decision& d : base.decisions) {
        if (d.action == Action::kEncode) d = Decision{d.tensor, Action::kSwap};
      }
    }
    const Bytes peak = incore_peak(w).bytes;
    Machine m;
    m.memory_bytes = uniform(rng, peak / 2 + 512, peak * 2 + 4096);
    m.link.h2d_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
    m.link.d2h_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
    memplan::search::ResumableLowerer lowerer(w);
    Program program;
    memplan::search::ResumableLowerer::Checkpoint checkpoint;
    lowerer.lower(base, program, checkpoint);
    require_same_program(program, lower(w, base));  // keeping a checkpoint changes nothing
    if (checkpoint.empty()) continue;
    memplan::search::ResumableLowerer other(w);
    Program resumed;
    for (int trial = 0; trial < 6; ++trial) {
      CAPTURE(trial);
      const Plan plan = changed_plan(w, base, rng);
      try {
        validate_plan(plan, w, "changed plan");
      } catch (const InputError&) {
        continue;
      }
      if (trial == 3) {  // a full lowering leaves nothing to rewind
        other.lower(plan, resumed);
        require_same_program(resumed, lower(w, plan));
        continue;
      }
      const auto r = other.resume(plan, checkpoint, resumed);
      const auto how = r.how;
      REQUIRE(how == other.resumable(plan, checkpoint));
      if (how == memplan::search::ResumableLowerer::Resumable::kNo) {
        ++refused;
        continue;
      }
      // Whether the part before the backward pass was the checkpoint's plan's, frees included.
      (r.same_prefix ? same_prefix : other_prefix) += 1;
      const Program expected = lower(w, plan);
      if (how == memplan::search::ResumableLowerer::Resumable::kExact) {
        ++exact;
        require_same_program(resumed, expected);
      } else {
        ++equivalent;
        require_same_run(resumed, expected, m);
      }
    }
    rewinds += other.rewinds();
  }
  CHECK(exact > kCases / 2);
  CHECK(equivalent > kCases / 10);
  CHECK(same_prefix > kCases / 2);
  CHECK(rewinds > kCases / 2);
  CHECK(other_prefix > 0);
  CHECK(refused > kCases / 10);
}

namespace {

using memplan::search::Evaluation;
using memplan::search::Evaluator;

// What a base plan is drawn for, and so what its trials change (Note [One oracle]).
enum class BaseKind {
  kKeepSwap,  // keeps and swaps only: trials keep a few swapped maps (KeepCheck)
  kEvict,     // no encodes or release points: trials evict a few kept maps (EvictionCheck)
  kAny,       // anything: trials change a few maps any way (resumed, or lowered)
};

Plan base_plan(const Workload& w, BaseKind kind, Rng& rng) {
  Plan plan = random_plan(w, rng);
  if (kind == BaseKind::kAny) return plan;
  plan.host_tensors.clear();
  plan.host_update = false;
  plan.host_prefetches.clear();
  for (Decision& d : plan.decisions) {
    d.release_before = kNoOp;
    if (d.action == Action::kEncode) d = Decision{d.tensor, Action::kKeep};
    if (kind == BaseKind::kKeepSwap && d.action == Action::kRecompute) {
      d = Decision{d.tensor, uniform(rng, 0, 1) == 0 ? Action::kKeep : Action::kSwap};
    }
  }
  return plan;
}

// A trial on `base` of the kind its base is drawn for.
Plan trial_plan(const Workload& w, const Plan& base, BaseKind kind, Rng& rng) {
  if (kind == BaseKind::kAny) return changed_plan(w, base, rng);
  Plan plan = base;
  const auto maps = find_feature_maps(w);
  const double p = uniform(rng, 0, 1) == 0 ? 0.1 : 0.4;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    Decision& d = plan.decisions[i];
    if (static_cast<double>(uniform(rng, 0, 999)) >= p * 1000) continue;
    if (kind == BaseKind::kKeepSwap && d.action == Action::kSwap) {
      d.action = Action::kKeep;
    } else if (kind == BaseKind::kEvict && d.action == Action::kKeep) {
      d.action = uniform(rng, 0, 1) == 0 ? Action::kRecompute : Action::kSwap;
      if (d.action == Action::kSwap && uniform(rng, 0, 2) == 0) {
        d.prefetch_before = op_id(uniform(rng, value(last_forward_use(maps[i], w)) + 1,
                                          value(maps[i].backward_uses.front())));
      }
    }
  }
  return plan;
}

// The oracle's answers for `plan` against a lowering of it and an engine run.
void require_engines_answers(Evaluator& oracle, const Workload& w, const Plan& plan,
                             const Machine& m, bool cost_first) {
  Engine engine;
  const Program program = lower(w, plan);
  EngineOptions stalls = EngineOptions::totals();
  stalls.record_stalls = true;
  const Timeline& want = engine.run(program, m, stalls);
  Evaluation fit;
  Evaluation cost;
  if (cost_first) {
    cost = oracle.cost(plan);
    fit = oracle.fits(plan);
  } else {
    fit = oracle.fits(plan);
    cost = oracle.cost(plan);
  }
  REQUIRE(fit.feasible == want.feasible);
  REQUIRE(fit.peak_reserved_bytes == want.peak_reserved_bytes);
  if (!want.feasible) {
    REQUIRE(fit.oom_op == want.oom->op);
    REQUIRE(fit.oom_bytes_missing == want.oom->bytes_missing);
  }
  const Evaluation full = memplan::search::summarize(want);
  REQUIRE(cost.feasible == full.feasible);
  REQUIRE(cost.iteration_ns == full.iteration_ns);
  REQUIRE(cost.peak_bytes == full.peak_bytes);
  REQUIRE(cost.peak_reserved_bytes == full.peak_reserved_bytes);
  REQUIRE(cost.stall_ns == full.stall_ns);
  REQUIRE(cost.oom_op == full.oom_op);
  REQUIRE(cost.oom_bytes_missing == full.oom_bytes_missing);
  const Timeline& got = oracle.timeline(plan);
  REQUIRE(got.feasible == want.feasible);
  REQUIRE(got.iteration_ns == want.iteration_ns);
  REQUIRE(got.stall_ns_by_cause == want.stall_ns_by_cause);
  REQUIRE(got.stalls.size() == want.stalls.size());
}

// A device of between `least` and `most` bytes (a quarter with the caching allocator) and links of
// 0.1 to 20 GB/s each way.
Machine random_machine(Rng& rng, Bytes least, Bytes most) {
  Machine m;
  m.memory_bytes = uniform(rng, least, most);
  if (uniform(rng, 0, 3) == 0) m.allocator = AllocatorModel::kCaching;
  m.link.h2d_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
  m.link.d2h_bytes_per_s = static_cast<double>(uniform(rng, 100, 20000)) * 1e6;
  return m;
}

}  // namespace

TEST_CASE("the oracle's answers through a base are a lowering's and the engine's", "[property]") {
  // Note [One oracle]: random graphs, machines (a quarter with the caching allocator, which the
  // allocation edits decline) and base plans of three kinds; trials changed from the base the way
  // its kind allows, asked through the base (some through a helper sharing it, some expected
  // ahead) and compared with a lowering and an engine run of each.
  constexpr int kCases = 400;
  Evaluator::Ways ways;
  int infeasible = 0;
  int expected = 0;
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed) + 104729);
    Workload w = random_workload(rng);
    if (uniform(rng, 0, 1) == 0) w.launch_ns = uniform(rng, 1, 3000);
    const auto kind = static_cast<BaseKind>(uniform(rng, 0, 2));
    const Plan base = base_plan(w, kind, rng);
    const Bytes peak = incore_peak(w).bytes;
    const Machine m = random_machine(rng, peak / 3 + 512, peak * 2 + 4096);
    Evaluator oracle(w, m);
    oracle.rebase(base);
    Evaluator helper(w, m);
    helper.share_base(oracle);
    std::vector<Plan> trials;
    for (int trial = 0; trial < 8; ++trial) {
      Plan plan = trial == 0 ? base : trial_plan(w, base, kind, rng);
      try {
        validate_plan(plan, w, "trial");
      } catch (const InputError&) {
        continue;
      }
      trials.push_back(std::move(plan));
    }
    // Half the cases expect their trials (answered ahead where the base's allocations can).
    if (uniform(rng, 0, 1) == 0) {
      oracle.expect(trials);
      expected += 1;
    }
    for (std::size_t k = 0; k < trials.size(); ++k) {
      CAPTURE(k);
      Evaluator& asked = k % 4 == 3 ? helper : oracle;
      require_engines_answers(asked, w, trials[k], m, k % 3 == 2);
      infeasible += asked.fits(trials[k]).feasible ? 0 : 1;
    }
    for (const Evaluator* e : {&oracle, &helper}) {
      ways.eviction_check += e->ways().eviction_check;
      ways.keep_check += e->ways().keep_check;
      ways.resumed += e->ways().resumed;
      ways.resumed_replay += e->ways().resumed_replay;
      ways.lowered += e->ways().lowered;
      ways.reused += e->ways().reused;
    }
  }
  CAPTURE(ways.eviction_check, ways.keep_check, ways.resumed, ways.resumed_replay, ways.lowered,
          ways.reused, infeasible, expected);
  // Every way is taken, and often.
  CHECK(ways.eviction_check > kCases);
  CHECK(ways.keep_check > kCases / 4);
  CHECK(ways.resumed > kCases);
  CHECK(ways.resumed_replay > kCases);
  CHECK(ways.lowered > kCases);
  CHECK(ways.reused > kCases * 4);
  CHECK(infeasible > kCases);
}

TEST_CASE(
    "a plan's times without device memory are its run's, and a bar skips only plans that "
    "cannot beat it",
    "[property]") {
  // Note [Runs without device memory] in sim/engine.hpp: time() against an engine run with the
  // allocator on a device without a limit (and the plan's own run where it fits); cost(plan, bar)
  // against cost(plan), with a bar from another random plan that fits, and the step back to back
  // of the plans it finds slower (a third of the graphs have a host side).
  constexpr int kCases = 300;
  int skipped = 0;
  int answered = 0;
  int back_to_back = 0;
  for (int seed = 1; seed <= kCases; ++seed) {
    CAPTURE(seed);
    Rng rng(static_cast<std::uint64_t>(seed) + 7919);
    Workload w = random_workload(rng);
    if (seed % 3 == 0) {
      for (Op& op : w.ops) {
        const bool waits = uniform(rng, 0, 4) == 0;
        op.host = HostSide{uniform(rng, 0, seed % 6 == 0 ? 3000 : 100), waits,
                           waits ? uniform(rng, 0, 2000) : 0};
      }
    }
    const Bytes peak = incore_peak(w).bytes;
    const Machine m = random_machine(rng, peak / 2 + 512, peak * 2 + 4096);
    Machine unlimited = m;
    unlimited.memory_bytes = std::int64_t{1} << 50;
    unlimited.host_memory_bytes.reset();
    Evaluator oracle(w, m);
    Evaluator reference(w, m);
    oracle.measure_step(true);
    reference.measure_step(true);
    Lowerer lowerer(w);
    Engine engine;
    Program program;
    std::optional<Evaluation> bar;
    for (int k = 0; k < 8; ++k) {
      CAPTURE(k);
      const Plan plan = random_plan(w, rng);
      lowerer.lower(plan, program);
      const Timeline& run = engine.run(program, unlimited, EngineOptions::totals());
      const Evaluation times = oracle.time(plan);
      REQUIRE(times.feasible == run.feasible);
      REQUIRE(times.iteration_ns == run.iteration_ns);
      REQUIRE(times.stall_ns == run.stall_ns());
      REQUIRE(times.peak_bytes == 0);
      REQUIRE(times.step_ns == 0);
      const Nanoseconds step = run.feasible ? step_period_ns(engine, program, unlimited, run) : 0;
      const Evaluation full = reference.cost(plan);
      if (full.feasible) {
        REQUIRE(times.iteration_ns == full.iteration_ns);
        REQUIRE(step == full.step_ns);
      }
      if (bar) {
        const Evaluation against = oracle.cost(plan, *bar);
        if (against.slower_than_bar) {
          ++skipped;
          REQUIRE_FALSE(against.feasible);
          REQUIRE_FALSE(memplan::search::better(full, *bar));
          REQUIRE(against.iteration_ns == times.iteration_ns);
          REQUIRE(against.unlimited_ns >= bar->iteration_ns);
          REQUIRE(against.step_ns == step);
          back_to_back += program.host.active() && step != times.iteration_ns ? 1 : 0;
        } else {
          ++answered;
          REQUIRE(against.feasible == full.feasible);
          REQUIRE(against.step_ns == full.step_ns);
          REQUIRE(against.iteration_ns == full.iteration_ns);
          REQUIRE(against.peak_reserved_bytes == full.peak_reserved_bytes);
          REQUIRE(against.oom_op == full.oom_op);
        }
      }
      if (full.feasible && (!bar || uniform(rng, 0, 1) == 0)) bar = full;
    }
  }
  CAPTURE(skipped, answered, back_to_back);
  CHECK(skipped > kCases);
  CHECK(answered > kCases);
  CHECK(back_to_back > kCases / 20);
}
