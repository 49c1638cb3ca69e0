#include "search/oracle/evaluator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include "search/oracle/eviction_check.hpp"
#include "search/oracle/keep_check.hpp"
#include "search/parallel.hpp"

namespace memplan::search {

// Note [One oracle]
// A policy asks three questions of a plan (fits, cost, timeline), and each has one answer: what a
// lowering of the plan and a run of its Program on the machine give (fits: the allocation replay
// of Note [Fitting without the clock], which finds the engine's verdict without the clock). How
// the Evaluator finds it is its own business. Given a base plan (rebase), it first works out how
// a plan differs from the base (Change), then takes the first way that applies:
//   1. only kept maps evicted (swapped or recomputed) and memory runs out in the forward pass:
//      the base's forward allocations with the evicted maps' frees moved up (EvictionCheck, Note
//      [Evicting in the forward pass]). It declines when the forward pass fits;
//   2. only swapped maps kept: the base's allocations with each kept map's two copies merged
//      (KeepCheck, Note [Keeping a swapped map, incrementally]);
//   3. the plan lowers like the base up to the backward pass (ResumableLowerer::resumable): the
//      base's lowering and replay kept there (its checkpoint), resumed (Note [Resuming a memory
//      check]);
//   4. a lowering of the whole plan, or the last one when the plan is the one lowered last (a
//      cost() after fits() of the same plan costs one lowering).
// cost() and timeline() need a Program, so they take 3 and 4. Each part the Evaluator keeps of
// the base (an EvictionCheck, a KeepCheck, a checkpoint) is made the first time a question needs
// it, so a base costs nothing where its questions take another way, and a rebase is cheap.
// Answers found ahead (expect) are kept with the change they answer and returned for the same
// change of the same base. Which way answered is counted (ways()); no way changes an answer, and
// tests/property/oracle_test.cpp asks every question of random plans both through a base and from
// scratch and compares.

// What the Evaluator keeps of its base plan. Each part is made the first time a question needs
// it (under `making`) and read-only after, so helpers on other threads (share_base) can read it.
struct Evaluator::Base {
  enum class Part : std::uint8_t { kNotMade, kMade, kDeclined };

  explicit Base(const sim::Workload& workload) : keep(workload), eviction(workload) {}

  sim::Plan plan;
  std::uint64_t generation = 0;  // distinct for every rebase
  std::mutex making;
  std::atomic<Part> keep_part{Part::kNotMade};
  std::atomic<Part> eviction_part{Part::kNotMade};
  std::atomic<Part> checkpoint_part{Part::kNotMade};
  KeepCheck keep;
  EvictionCheck eviction;
  ResumableLowerer::Checkpoint checkpoint;
  MemoryReplay replay;          // the base's replay up to where the backward pass starts
  bool replayed = false;        // the base's allocations before the backward pass fit
  sim::Bytes memory_bytes = 0;  // the replay's device
  sim::AllocatorModel allocator = sim::AllocatorModel::kArena;
};

// How a plan differs from the base.
struct Evaluator::Change {
  enum class Kind : std::uint8_t { kNone, kEvictions, kKeeps, kOther };
  Kind kind = Kind::kOther;
  std::vector<int> maps;  // the decisions evicted or kept, ascending
};

// What answering from the base's allocations edits; one per thread answering at once.
struct Evaluator::Scratch {
  Change change;
  KeepCheck::Scratch keep;
  EvictionCheck::Scratch eviction;
};

// An answer found ahead (expect), for a change of one base.
struct Evaluator::Expected {
  std::uint64_t generation = 0;
  Change change;
  std::optional<Evaluation> answer;
  std::size_t Ways::*way = nullptr;
};

namespace {

std::uint64_t next_generation() {
  static std::atomic<std::uint64_t> generations{0};
  return ++generations;
}

// Lowering reads only the action of a kept map, so two kept decisions are the same decision.
bool same_lowering(const sim::Decision& a, const sim::Decision& b) {
  return a.action == b.action && (a.action == sim::Action::kKeep || a == b);
}

// A run without device memory's answer (Evaluator::time).
Evaluation times_of(const sim::Timeline& timeline) {
  Evaluation e;
  e.feasible = timeline.feasible;
  e.iteration_ns = timeline.iteration_ns;
  e.stall_ns = timeline.stall_ns();
  return e;
}

}  // namespace

Evaluation summarize(const sim::Timeline& timeline) {
  Evaluation e;
  e.feasible = timeline.feasible;
  e.iteration_ns = timeline.iteration_ns;
  e.peak_bytes = timeline.peak_bytes;
  e.peak_reserved_bytes = timeline.peak_reserved_bytes;
  e.stall_ns = timeline.stall_ns();
  if (timeline.oom) {
    e.oom_op = timeline.oom->op;
    e.oom_bytes_missing = timeline.oom->bytes_missing;
  }
  return e;
}

Evaluator::Evaluator(const sim::Workload& workload, const sim::Machine& machine,
                     std::vector<sim::Nanoseconds> collective_ready_ns)
    : workload_(&workload),
      machine_(machine),
      lowerer_(workload),
      totals_(sim::EngineOptions::totals()),
      scratch_(std::make_unique<Scratch>()) {
  totals_.collective_ready_ns = std::move(collective_ready_ns);
  // timeline()'s: the stalls with the tensor they wait for, no spans or memory curve.
  timeline_ = totals_;
  timeline_.record_stalls = true;
  times_ = sim::EngineOptions::times();
  times_.collective_ready_ns = totals_.collective_ready_ns;
  unlimited_ = machine_;
  unlimited_.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
  unlimited_.host_memory_bytes.reset();
}

Evaluator::~Evaluator() = default;

void Evaluator::check_stop() const {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
}

void Evaluator::rebase(const sim::Plan& plan) {
  if (!own_base_) own_base_ = std::make_unique<Base>(*workload_);
  Base& b = *own_base_;
  b.plan = plan;
  b.generation = next_generation();
  b.keep_part.store(Base::Part::kNotMade);
  b.eviction_part.store(Base::Part::kNotMade);
  b.checkpoint_part.store(Base::Part::kNotMade);
  base_ = &b;
}

void Evaluator::clear_base() {
  base_ = nullptr;
}

void Evaluator::share_base(Evaluator& owner) {
  base_ = owner.base_;
}

// The change from `base` to `plan` (Note [One oracle]).
void Evaluator::diff(const sim::Plan& base, const sim::Plan& plan, Change& out) {
  out.kind = Change::Kind::kOther;
  out.maps.clear();
  if (plan.decisions.size() != base.decisions.size() || plan.algorithms != base.algorithms ||
      plan.host_tensors != base.host_tensors || plan.host_update != base.host_update ||
      plan.host_prefetches != base.host_prefetches)
    return;
  bool evicts = false;
  bool keeps = false;
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    const sim::Decision& a = base.decisions[i];
    const sim::Decision& b = plan.decisions[i];
    if (a.tensor != b.tensor) return;
    if (same_lowering(a, b)) continue;
    if (a.action == sim::Action::kKeep) {
      evicts = true;
    } else if (a.action == sim::Action::kSwap && b.action == sim::Action::kKeep) {
      keeps = true;
    } else {
      return;
    }
    if (evicts && keeps) return;
    out.maps.push_back(static_cast<int>(i));
  }
  out.kind = evicts ? Change::Kind::kEvictions : keeps ? Change::Kind::kKeeps : Change::Kind::kNone;
}

// Makes the part of the base that `change` is answered from (ways 1 and 2 of Note [One oracle]);
// false when none applies.
bool Evaluator::prepare(const Change& change) {
  using Part = Base::Part;
  auto make = [&](std::atomic<Part>& part, auto&& build) {
    Part now = part.load(std::memory_order_acquire);
    if (now == Part::kNotMade) {
      const std::lock_guard<std::mutex> lock(base_->making);
      now = part.load(std::memory_order_relaxed);
      if (now == Part::kNotMade) {
        now = build() ? Part::kMade : Part::kDeclined;
        part.store(now, std::memory_order_release);
      }
    }
    return now == Part::kMade;
  };
  Base& b = *base_;
  switch (change.kind) {
    case Change::Kind::kNone:
    case Change::Kind::kEvictions:
      return make(b.eviction_part, [&] { return b.eviction.rebase(b.plan, lowerer_, machine_); });
    case Change::Kind::kKeeps:
      return make(b.keep_part, [&] { return b.keep.rebase(b.plan, lowerer_, machine_); });
    case Change::Kind::kOther:
      return false;
  }
  return false;
}

std::optional<Evaluation> Evaluator::from_base(const sim::Plan& plan, Scratch& scratch,
                                               std::size_t Ways::*& way) const {
  const Change& change = scratch.change;
  if (change.kind == Change::Kind::kKeeps) {
    way = &Ways::keep_check;
    return base_->keep.check(change.maps, scratch.keep);
  }
  way = &Ways::eviction_check;
  return base_->eviction.check(plan, change.maps, scratch.eviction);
}

Evaluation Evaluator::fits(const sim::Plan& plan) {
  check_stop();
  if (base_ != nullptr) {
    Change& change = scratch_->change;
    diff(base_->plan, plan, change);
    for (const Expected& x : expected_) {
      if (x.answer && x.generation == base_->generation && x.change.kind == change.kind &&
          x.change.maps == change.maps)
        return *x.answer;
    }
    ++memory_checks_;
    std::size_t Ways::*way = nullptr;
    if (prepare(change)) {
      if (const std::optional<Evaluation> e = from_base(plan, *scratch_, way)) {
        ++(ways_.*way);
        return *e;
      }
    }
  } else {
    ++memory_checks_;
  }
  const bool from_checkpoint = lower(plan);
  return replay(from_checkpoint);
}

void Evaluator::expect(std::span<const sim::Plan> plans) {
  expected_.clear();
  if (base_ == nullptr) return;
  if (ahead_.size() < plans.size()) ahead_.resize(plans.size());
  expected_.resize(plans.size());
  std::vector<char> answerable(plans.size(), 0);
  for (std::size_t k = 0; k < plans.size(); ++k) {
    diff(base_->plan, plans[k], ahead_[k].change);
    answerable[k] = prepare(ahead_[k].change) ? 1 : 0;
  }
  parallel_each(
      0, plans.size(),
      [&](std::size_t k) {
        if (answerable[k] == 0) return;
        Expected& x = expected_[k];
        x.answer = from_base(plans[k], ahead_[k], x.way);
      },
      Split::kOnePerTask);
  for (std::size_t k = 0; k < plans.size(); ++k) {
    Expected& x = expected_[k];
    x.generation = base_->generation;
    x.change = ahead_[k].change;
    if (!x.answer) continue;
    ++memory_checks_;
    ++(ways_.*x.way);
  }
}

// Makes the base's checkpoint (way 3 of Note [One oracle]): its lowering, kept where the backward
// pass starts, and its allocation replay up to there. Lowers into program_.
bool Evaluator::prepare_checkpoint() {
  using Part = Base::Part;
  Base& b = *base_;
  Part now = b.checkpoint_part.load(std::memory_order_acquire);
  if (now != Part::kNotMade) return now == Part::kMade;
  const std::lock_guard<std::mutex> lock(b.making);
  now = b.checkpoint_part.load(std::memory_order_relaxed);
  if (now != Part::kNotMade) return now == Part::kMade;
  lowerer_.lower(b.plan, program_, b.checkpoint);
  lowered_ = b.plan;
  lowered_generation_ = b.generation;
  lowered_same_prefix_ = !b.checkpoint.empty();
  b.replayed = false;
  if (!b.checkpoint.empty()) {
    Evaluation e;
    b.replay.begin(machine_, program_, e);
    b.replayed =
        b.replay.replay(program_.stream(sim::StreamId::kCompute), 0, b.checkpoint.placed_size(), e);
    b.memory_bytes = machine_.memory_bytes;
    b.allocator = machine_.allocator;
  }
  now = b.checkpoint.empty() ? Part::kDeclined : Part::kMade;
  b.checkpoint_part.store(now, std::memory_order_release);
  return now == Part::kMade;
}

bool Evaluator::lower(const sim::Plan& plan) {
  const std::uint64_t generation = base_ != nullptr ? base_->generation : 0;
  if (lowered_valid_ && lowered_ == plan) {
    ++ways_.reused;
    return lowered_same_prefix_ && lowered_generation_ == generation;
  }
  lowered_valid_ = false;
  bool same_prefix = false;
  bool resumed = false;
  if (base_ != nullptr) {
    const bool made = base_->checkpoint_part.load(std::memory_order_acquire) == Base::Part::kMade;
    if (made || (lowerer_.resumable(plan, base_->plan) != ResumableLowerer::Resumable::kNo &&
                 prepare_checkpoint())) {
      const ResumableLowerer::Resumption r = lowerer_.resume(plan, base_->checkpoint, program_);
      resumed = r.how != ResumableLowerer::Resumable::kNo;
      same_prefix = r.same_prefix;
    }
  }
  if (resumed) {
    ++ways_.resumed;
  } else {
    lowerer_.lower(plan, program_);
    ++ways_.lowered;
  }
  lowered_ = plan;
  lowered_valid_ = true;
  lowered_generation_ = generation;
  lowered_same_prefix_ = same_prefix;
  return same_prefix;
}

// Note [Resuming a memory check]
// PoocH's step 3 checks hundreds of plans that differ from the one it started from only by maps
// swapped there and recomputed here: their lowerings share the forward pass (Note [Resuming a
// lowering] in search/oracle/resumed_lowering.cpp), half the step. The base's checkpoint keeps
// its lowering where the backward pass starts and its allocation replay at the same point, so a
// check lowers and replays only the backward pass. The replay goes on from the copy when the
// resumed compute stream up to the backward pass is the checkpoint's plan's
// (ResumableLowerer::resume says so): the plan frees the same buffers there. A buffer made in the
// forward pass is freed there unless some later instruction reads it, and a plan whose backward
// pass reads a buffer the other's did not (a recomputation re-reading the input batch) frees it
// later; then the replay starts over. The lowering is resumed either way.
Evaluation Evaluator::replay(bool from_checkpoint) {
  Evaluation e;
  const auto& stream = program_.stream(sim::StreamId::kCompute);
  const Base* b = base_;
  if (from_checkpoint && b != nullptr && b->replayed && b->memory_bytes == machine_.memory_bytes &&
      b->allocator == machine_.allocator) {
    ++ways_.resumed_replay;
    replay_.resume(b->replay, program_, e);
    replay_.replay(stream, b->checkpoint.placed_size(), stream.size(), e);
  } else {
    replay_.begin(machine_, program_, e);
    replay_.replay(stream, 0, stream.size(), e);
  }
  replay_.end(e);
  return e;
}

namespace {
std::atomic<const Evaluator::Watcher*> watcher{nullptr};
}  // namespace

void Evaluator::watch(const Watcher* w) {
  watcher.store(w);
}

Evaluation Evaluator::cost(const sim::Plan& plan) {
  check_stop();
  lower(plan);
  ++count_;
  const sim::Timeline& alone = engine_.run(program_, machine_, totals_);
  Evaluation e = summarize(alone);
  if (e.feasible && measure_step_) {
    e.step_ns =
        sim::step_period_ns(engine_, program_, machine_, alone, totals_.collective_ready_ns);
    if (e.step_ns >= sim::kMaxNanoseconds) e.feasible = false;  // ran past the clock's end
  }
  if (const Watcher* w = watcher.load(std::memory_order_relaxed)) (*w)(machine_, e);
  if (!e.feasible && measure_excess_) {
    const sim::Timeline& t = engine_.run(program_, unlimited_, totals_);
    e.excess_bytes = std::max<sim::Bytes>(1, t.peak_reserved_bytes - machine_.memory_bytes);
    e.unlimited_ns = t.iteration_ns;
  }
  return e;
}

Evaluation Evaluator::time(const sim::Plan& plan) {
  ++count_;
  return uncounted_time(plan);
}

Evaluation Evaluator::uncounted_time(const sim::Plan& plan) {
  check_stop();
  lower(plan);
  return times_of(engine_.run(program_, unlimited_, times_));
}

Evaluation Evaluator::cost(const sim::Plan& plan, const Evaluation& bar) {
  if (!bar.feasible) return cost(plan);
  Evaluation e = uncounted_time(plan);
  // Not better than bar whether it fits or not: no shorter step alone (so no plan for the repair
  // chains either), and no shorter step back to back, measured only then; not both equal (the
  // peak decides a tie).
  bool slower = e.feasible && e.iteration_ns >= bar.iteration_ns;
  if (slower && measure_step_) {  // from the run just made, which the engine holds
    e.step_ns = sim::step_period_ns(engine_, program_, unlimited_, engine_.last_run(),
                                    totals_.collective_ready_ns);
    slower = e.step_ns < sim::kMaxNanoseconds && e.step_ns >= bar.step_ns;
  }
  if (!slower || (e.iteration_ns == bar.iteration_ns && e.step_ns == bar.step_ns))
    return cost(plan);
  ++count_;
  e.feasible = false;
  e.unlimited_ns = e.iteration_ns;
  e.slower_than_bar = true;
  return e;
}

const sim::Timeline& Evaluator::timeline(const sim::Plan& plan) {
  check_stop();
  lower(plan);
  ++count_;
  const sim::Timeline& t = engine_.run(program_, machine_, timeline_);
  if (const Watcher* w = watcher.load(std::memory_order_relaxed)) (*w)(machine_, summarize(t));
  return t;
}

}  // namespace memplan::search
