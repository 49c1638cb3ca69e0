#pragma once
// Evaluator: the simulator as an oracle for policies and the search. It answers three questions
// about a plan — does its device memory fit (fits), what does it cost (cost), how does it run
// (timeline) — each with one answer, the one a lowering and a simulation of the plan give, however
// it finds it. Why one object: policies ask thousands of questions about plans that differ from
// one plan in a few maps, and the cheap ways to answer them (an edit of that plan's allocations,
// a lowering resumed where the backward pass starts) each apply to one kind of change; the
// Evaluator works out what changed and picks the cheapest way that applies (Note [One oracle] in
// evaluator.cpp), so a policy never chooses and no two ways can drift apart unseen
// (tests/property/oracle_test.cpp holds every way to a full lowering).
// It owns its Lowerer, Program and Engine (and so their buffers), which makes repeated questions
// cheap; use one Evaluator per thread.
//
// Note [A rank among fixed peers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A plan for one rank of a job is priced with the other ranks fixed: each of the rank's collectives
// starts no earlier than its peers' latest arrival (the ready times, per Program::collectives
// entry, that sim::peer_ready_ns finds in a simulation of the job), as in the job's own
// simulation (Note [Collective start] in sim/engine.hpp). The Evaluator passes them to every
// engine run it makes (EngineOptions::collective_ready_ns), so a policy or the search deciding
// for that rank sees a swap that fits into a collective's wait cost nothing and one that delays
// the rank's arrival cost what it delays, without knowing of the job. Memory is not timed
// (fits() replays allocations only), so the ready times change the time answers only. Helpers an
// Evaluator's user creates for the same rank take the same ready times (collective_ready_ns()).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/oracle/evaluation.hpp"
#include "search/oracle/memory_replay.hpp"
#include "search/oracle/resumed_lowering.hpp"
#include "sim/engine.hpp"

namespace memplan::search {

/// When a policy or a search must stop early: past a deadline, or once a caller's flag is set.
/// An Evaluator that has one throws Stopped from its questions once it is due, so a policy
/// deciding under a time limit unwinds at its next question, wherever it is.
struct Stop {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  const std::atomic<bool>* cancel = nullptr;
  [[nodiscard]] bool cancelled() const {
    return cancel != nullptr && cancel->load(std::memory_order_relaxed);
  }
  [[nodiscard]] bool due() const {
    return cancelled() || std::chrono::steady_clock::now() >= deadline;
  }
};

/// Thrown by an Evaluator whose Stop is due.
class Stopped : public std::runtime_error {
 public:
  Stopped() : std::runtime_error("stopped: past the deadline or cancelled") {}
};

class Evaluator {
 public:
  /// The workload must outlive the Evaluator; the machine is copied. `collective_ready_ns`: when
  /// each collective of the workload may start (Note [A rank among fixed peers]); empty: each on
  /// its arrival, as for a single GPU or a rank whose peers are assumed alike.
  Evaluator(const sim::Workload& workload, const sim::Machine& machine,
            std::vector<sim::Nanoseconds> collective_ready_ns = {});
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // The questions.

  /// Whether the plan's device memory fits. `feasible` and `peak_reserved_bytes`; for a plan that
  /// does not fit, `oom_op` and `oom_bytes_missing`: each what cost() gives. The time fields,
  /// `peak_bytes` and `excess_bytes` are zero. Device memory only: a plan that fits can still run
  /// out of host memory (Machine::host_memory_bytes), which cost() sees. Counts a memory check.
  Evaluation fits(const sim::Plan& plan);
  /// The plan run on the machine: for a plan that fits, `feasible`, `iteration_ns`, `peak_bytes`,
  /// `peak_reserved_bytes` and `stall_ns`; for one that does not, where memory (device or host)
  /// ran out, and the other fields of the run up to there, plus `excess_bytes` when measured
  /// (measure_excess). A caller that needs the time only of plans that fit asks fits() first: a
  /// cost() of the plan fits() last lowered runs that lowering. Counts a plan.
  Evaluation cost(const sim::Plan& plan);
  /// The plan's step alone without its memory (Note [Runs without device memory] in
  /// sim/engine.hpp): `iteration_ns` and `stall_ns`, those it takes on a device and a host without
  /// a memory limit; `feasible` unless the run saturates the clock; no peaks, and no step back to
  /// back (`step_ns` zero). Counts a plan.
  Evaluation time(const sim::Plan& plan);
  /// cost(plan) where the plan may be better than `bar`, a plan that fits (better() in
  /// search/engine/plan_search.hpp: by the step, then the step alone, then the peak); where its
  /// times alone show that it is not, and that its step alone is no shorter than bar's (what the
  /// search's repair chains look for among plans that do not fit, Note [Repair chains]), the
  /// answer is those times (the step back to back measured as cost() does) with `feasible`
  /// false and `slower_than_bar` set, its memory not checked. For a bar that does not fit,
  /// cost(plan). Counts a plan.
  Evaluation cost(const sim::Plan& plan, const Evaluation& bar);
  /// The plan's timeline (stalls with the tensor they wait for; no spans or memory curve), up to
  /// where memory ran out for a plan that does not fit; valid until the next question. Reuses a
  /// lowering as cost() does. Counts a plan.
  const sim::Timeline& timeline(const sim::Plan& plan);

  // What lets the Evaluator answer cheaply (Note [One oracle]); none changes an answer.

  /// The plan the next questions change in a few maps (PoocH's keep scans, DTR's evictions, ...),
  /// until the next rebase() or clear_base(): each question then compares its plan with this one
  /// and answers from what the two share where it can. Costs nothing until a question needs it.
  void rebase(const sim::Plan& plan);
  /// No base: every question lowers its plan (or reuses the last lowering).
  void clear_base();
  /// A helper's view of `owner`'s base (PoocH's step 3 asks an idle core about its next trial):
  /// what the owner keeps of it is shared read-only, made once by whichever asks first, until this
  /// Evaluator's next rebase() or clear_base(). The owner must outlive that and not rebase while
  /// this Evaluator answers.
  void share_base(Evaluator& owner);
  /// A hint: fits() may soon be asked about `plans`. Those the base's allocations answer (a few
  /// of its swapped maps kept, a few kept ones evicted) are answered now, at once on oneTBB's
  /// workers, each counting a memory check; fits() of one of them, until the next expect() or a
  /// change of base, returns that answer uncounted. The others are left to fits().
  void expect(std::span<const sim::Plan> plans);

  // Accounting and limits.

  [[nodiscard]] const sim::Workload& workload() const { return *workload_; }
  [[nodiscard]] const sim::Machine& machine() const { return machine_; }
  /// The ready times every engine run of this Evaluator uses (Note [A rank among fixed peers]).
  [[nodiscard]] const std::vector<sim::Nanoseconds>& collective_ready_ns() const {
    return totals_.collective_ready_ns;
  }
  /// cost() and timeline() answers so far, including those credited by helpers.
  [[nodiscard]] std::size_t count() const { return count_; }
  /// fits() answers so far (not in count()), including those made ahead (expect) and credited.
  [[nodiscard]] std::size_t memory_checks() const { return memory_checks_; }
  /// How the answers were found (Note [One oracle]): fits() answers by the first two ways, the
  /// Program of every other answer by the rest. Tests check that every way is taken.
  struct Ways {
    std::size_t eviction_check = 0;  // the base's forward allocations, evicted maps' frees moved
    std::size_t keep_check = 0;      // the base's allocations, kept maps' copies merged
    std::size_t resumed = 0;         // a lowering resumed from the base's checkpoint
    std::size_t resumed_replay = 0;  // ... whose replay went on from the checkpoint's too
    std::size_t lowered = 0;         // a lowering of the whole plan
    std::size_t reused = 0;          // the lowering of the last question, of the same plan
  };
  [[nodiscard]] const Ways& ways() const { return ways_; }
  /// Counts answers made on this evaluator's behalf by other Evaluators (worker threads).
  void credit(std::size_t plans, std::size_t memory_checks = 0) {
    count_ += plans;
    memory_checks_ += memory_checks;
  }
  /// From now on every question throws Stopped once `stop` is due (nullptr: never). The Stop
  /// must outlive its use; helpers a policy creates should share it (stop()).
  void stop_when(const Stop* stop) { stop_ = stop; }
  [[nodiscard]] const Stop* stop() const { return stop_; }
  /// From now on cost() of a plan that does not fit runs it once more without a memory limit, to
  /// fill Evaluation::excess_bytes (the search ranks plans that do not fit by it).
  void measure_excess(bool on) { measure_excess_ = on; }
  /// From now on cost() of a plan that fits fills Evaluation::step_ns, the step back to back (the
  /// search ranks plans by it): for a step with a host side, one or a few more engine runs
  /// (sim::step_period_ns). Off (the default, what policies decide with): step_ns is zero.
  void measure_step(bool on) { measure_step_ = on; }

  /// A test's view of every answer: from now on each cost() and timeline() of any Evaluator calls
  /// `watcher` with its machine and answer, on the thread that asked, until watch(nullptr) (the
  /// lower bound's tests check every plan a search evaluates against it). The watcher must be
  /// safe to call from several threads at once and outlive its use; none costs one atomic load
  /// per answer.
  using Watcher = std::function<void(const sim::Machine&, const Evaluation&)>;
  static void watch(const Watcher* watcher);

 private:
  struct Base;
  struct Change;
  struct Scratch;
  struct Expected;

  void check_stop() const;
  /// time() without counting a plan: the caller counts it.
  Evaluation uncounted_time(const sim::Plan& plan);
  static void diff(const sim::Plan& base, const sim::Plan& plan, Change& out);
  bool prepare(const Change& change);
  std::optional<Evaluation> from_base(const sim::Plan& plan, Scratch& scratch,
                                      std::size_t Ways::*& way) const;
  bool prepare_checkpoint();
  /// Makes program_ the plan's lowering: the last one, resumed, or new; returns whether the
  /// compute stream before the backward pass is the checkpoint's (its replay can go on from it).
  bool lower(const sim::Plan& plan);
  Evaluation replay(bool from_checkpoint);

  const sim::Workload* workload_;
  sim::Machine machine_;
  ResumableLowerer lowerer_;
  sim::Program program_;  // reused between plans
  sim::Plan lowered_;     // the plan program_ is a lowering of, when lowered_valid_
  bool lowered_valid_ = false;
  bool lowered_same_prefix_ = false;      // lower()'s answer for it ...
  std::uint64_t lowered_generation_ = 0;  // ... against this base (0: none)
  sim::Engine engine_;
  sim::EngineOptions totals_;    // cost()'s engine runs, with the collectives' ready times
  sim::EngineOptions timeline_;  // timeline()'s
  sim::EngineOptions times_;     // time()'s: no device memory
  sim::Machine unlimited_;       // machine_ without memory limits: time()'s, and the excess's
  MemoryReplay replay_;
  std::unique_ptr<Base> own_base_;
  Base* base_ = nullptr;  // own_base_'s, an owner's (share_base), or null
  std::unique_ptr<Scratch> scratch_;
  std::vector<Scratch> ahead_;  // expect()'s, one per plan
  std::vector<Expected> expected_;
  std::size_t count_ = 0;
  std::size_t memory_checks_ = 0;
  Ways ways_;
  const Stop* stop_ = nullptr;
  bool measure_excess_ = false;
  bool measure_step_ = false;
};

/// rebase() for a scope: the base is cleared when the scope ends, so that questions asked after a
/// policy's loop are not compared with a plan they do not change.
class BaseScope {
 public:
  BaseScope(Evaluator& evaluator, const sim::Plan& plan) : evaluator_(evaluator) {
    evaluator_.rebase(plan);
  }
  ~BaseScope() { evaluator_.clear_base(); }
  BaseScope(const BaseScope&) = delete;
  BaseScope& operator=(const BaseScope&) = delete;

 private:
  Evaluator& evaluator_;
};

/// The Evaluation summary of a timeline.
Evaluation summarize(const sim::Timeline& timeline);

}  // namespace memplan::search
