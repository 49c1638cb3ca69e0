#include "search/oracle/eviction_check.hpp"

#include <algorithm>

#include "core/check.hpp"
#include "core/feature_maps.hpp"

namespace memplan::search {

// Note [Evicting in the forward pass]
// Before the first op that is not a forward op, a lowered plan regenerates nothing (a forward op
// reads a map only up to its last forward use, and a map is dropped only after it), so there its
// compute stream visits the ops in issue order: each op's allocations (prefetches issued before
// it, its outputs, its workspace), its run, and the frees after it. Evicting a map m the plan
// keeps changes that part in one way only: m's buffer is freed after its last forward use (a
// swapped map's once its copy-out has read it, which the compute stream waits for there; the copy
// itself allocates nothing) instead of after its last use. The rest comes later: a swapped m's
// prefetch at its prefetch point, a recomputed m's regeneration at its first backward use, in new
// buffers. So, as long as the prefetch point is not a forward op, the evicted plan's allocations
// and frees up to there are the base's with each evicted map's free moved to after its last
// forward use: buffers are created in the same order (the same ids), and a free among the frees
// after one op, with no allocation between them, leaves the arena as any order of them does
// (neighbours coalesce). Memory runs out in that part exactly where the replay of it runs out.
// One exception: a tensor that exists before the step is never dropped by the lowering, so
// regenerating an evicted map that reads it, later, keeps its buffer alive past the forward pass
// where the base frees it; a map whose regeneration could read such a tensor (through the
// producers of the tensors it is made from) is not checked here, nor is one that an op of another
// stream reads in the forward pass (its free waits for that stream), nor a regeneration issued
// early, inside the forward pass (Note [Issue point of a recomputation] in core/plan.hpp).
// tests/search/oracle/evaluator_test.cpp and tests/property/oracle_test.cpp compare the answers
// Evaluator::fits finds this way with a lowering and a simulation of the evicted plan.
namespace {
// Whether an op of another stream reads the map in forward: its buffer is freed at a join of that
// stream (Lowerer::place_side_frees), not necessarily after its last forward use.
bool read_on_side_stream(const sim::FeatureMap& map, const sim::Workload& w) {
  return std::any_of(map.forward_uses.begin(), map.forward_uses.end(),
                     [&](sim::OpId u) { return w.op(u).stream != 0; });
}
}  // namespace

EvictionCheck::EvictionCheck(const sim::Workload& workload) : workload_(&workload) {}

bool EvictionCheck::rebase(const sim::Plan& plan, sim::Lowerer& lowerer,
                           const sim::Machine& machine) {
  ready_ = false;
  machine_ = machine;
  if (machine_.allocator != sim::AllocatorModel::kArena || plan.host_update ||
      !plan.host_tensors.empty()) {
    return false;
  }
  for (const sim::Decision& d : plan.decisions) {
    if (d.action == sim::Action::kEncode || d.release_before != sim::kNoOp) return false;
  }
  const sim::Workload& w = *workload_;
  // The forward part: the ops before the first one that is not a forward op.
  std::size_t forward_ops = 0;
  while (forward_ops < w.ops.size() && w.ops[forward_ops].phase == sim::Phase::kForward)
    ++forward_ops;
  forward_ops_ = forward_ops;
  lowerer.lower(plan, program_);
  ops_.clear();
  // after_op[u]: the position in ops_ after op u's calls (before the next op's).
  std::vector<std::int32_t> after_op(forward_ops, -1);
  std::vector<sim::BufferId> buffer_of(w.tensors.size(), sim::kNoBuffer);
  std::vector<char> freed_early(w.tensors.size(), 0);  // a tensor the forward part frees
  for (const sim::Instruction& in : program_.stream(sim::StreamId::kCompute)) {
    if (in.kind != sim::InstrKind::kAlloc && in.kind != sim::InstrKind::kFree) continue;
    if (in.op != sim::kNoOp && index(in.op) >= forward_ops) break;
    const sim::Buffer& b = program_.buffers[index(in.buffer)];
    if (in.kind == sim::InstrKind::kAlloc && b.role == sim::BufferRole::kTensor &&
        buffer_of[index(b.tensor)] == sim::kNoBuffer)
      buffer_of[index(b.tensor)] = in.buffer;
    if (in.kind == sim::InstrKind::kFree && b.role == sim::BufferRole::kTensor)
      freed_early[index(b.tensor)] = 1;
    ops_.push_back({in.buffer, in.op, in.kind == sim::InstrKind::kAlloc});
    if (in.op != sim::kNoOp) after_op[index(in.op)] = static_cast<std::int32_t>(ops_.size());
  }
  // Ops with no call of their own end where the op before them ends.
  std::int32_t end = 0;
  for (std::int32_t& a : after_op) {
    a = std::max(a, end);
    end = a;
  }
  // reads_freed[t]: regenerating t could read a pre-existing tensor the forward part frees.
  std::vector<char> reads_freed(w.tensors.size(), 0);
  for (const sim::Op& op : w.ops) {
    bool reads = false;
    for (sim::TensorId x : op.inputs) {
      const bool preexisting = sim::is_preexisting(w.tensor(x).kind);
      reads = reads || (preexisting ? freed_early[index(x)] != 0 : reads_freed[index(x)] != 0);
    }
    if (!reads) continue;
    for (sim::TensorId o : op.outputs) reads_freed[index(o)] = 1;
  }
  const std::vector<sim::FeatureMap> maps = sim::find_feature_maps(w);
  std::vector<std::int32_t> map_of(w.tensors.size(), -1);
  for (std::size_t m = 0; m < maps.size(); ++m)
    map_of[index(maps[m].tensor)] = static_cast<std::int32_t>(m);
  eviction_.assign(plan.decisions.size(), Eviction{});
  for (std::size_t d = 0; d < plan.decisions.size(); ++d) {
    const sim::TensorId t = plan.decisions[d].tensor;
    const std::int32_t m = map_of[index(t)];
    MEMPLAN_CHECK(m >= 0, "a plan decides feature maps only");
    Eviction& e = eviction_[d];
    e.kept = plan.decisions[d].action == sim::Action::kKeep;
    e.default_prefetch = sim::default_prefetch_point(maps[static_cast<std::size_t>(m)], w);
    e.reads_freed = reads_freed[index(t)] != 0;
    const sim::OpId last = sim::last_forward_use(maps[static_cast<std::size_t>(m)], w);
    if (index(last) >= forward_ops) continue;  // its free moves past the forward part
    // An output written in place lives in the buffer of the tensor it overwrote.
    sim::TensorId holder = t;
    while (buffer_of[index(holder)] == sim::kNoBuffer &&
           w.tensor(holder).in_place_of != sim::kNoTensor)
      holder = w.tensor(holder).in_place_of;
    e.buffer = buffer_of[index(holder)];
    e.unchecked =
        e.buffer == sim::kNoBuffer || read_on_side_stream(maps[static_cast<std::size_t>(m)], w);
    e.free_at = after_op[index(last)];
  }
  ready_ = true;
  return true;
}

std::optional<Evaluation> EvictionCheck::check(const sim::Plan& plan,
                                               const std::vector<int>& evicted,
                                               Scratch& scratch) const {
  MEMPLAN_CHECK(ready_, "EvictionCheck::check after a rebase that accepted the plan");
  auto& moved = scratch.moved_;
  auto& replay = scratch.replay_;
  moved.clear();
  for (int m : evicted) {
    const Eviction& e = eviction_[static_cast<std::size_t>(m)];
    const sim::Decision& d = plan.decisions[static_cast<std::size_t>(m)];
    MEMPLAN_CHECK(e.kept, "an evicted map is kept in the base");
    if (e.unchecked || d.release_before != sim::kNoOp) return std::nullopt;
    if (d.action == sim::Action::kRecompute && e.reads_freed) return std::nullopt;
    if (d.action == sim::Action::kSwap) {
      const sim::OpId at = d.prefetch_before != sim::kNoOp ? d.prefetch_before : e.default_prefetch;
      if (index(at) < forward_ops_) return std::nullopt;
    } else if (d.action != sim::Action::kRecompute ||
               (d.prefetch_before != sim::kNoOp && index(d.prefetch_before) < forward_ops_)) {
      return std::nullopt;  // a regeneration issued inside the forward part
    }
    if (e.free_at >= 0) moved.emplace_back(e.free_at, e.buffer);
  }
  std::sort(moved.begin(), moved.end());
  Evaluation e;
  replay.begin(machine_, program_, e);
  auto next = moved.begin();
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    for (; next != moved.end() && next->first == static_cast<std::int32_t>(i); ++next)
      replay.release(next->second);
    const MemoryOp& op = ops_[i];
    if (op.alloc) {
      if (!replay.allocate(op.buffer, op.op, e)) break;
    } else {
      replay.release(op.buffer);
    }
  }
  if (e.feasible) return std::nullopt;  // the forward part fits: the rest is not known here
  replay.end(e);
  return e;
}

}  // namespace memplan::search
