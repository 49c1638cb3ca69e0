#include "search/oracle/keep_check.hpp"

#include "core/check.hpp"

namespace memplan::search {

// Note [Keeping a swapped map, incrementally]
// Lowered, a swapped map has two device copies: the forward one, allocated by its producer and
// freed after its last forward use (the compute stream first waits for its copy-out), and the
// prefetched one, allocated at its prefetch point and freed after its last backward use. Kept,
// it has one, allocated by its producer and freed after its last backward use. Everything else
// the lowering emits for the swap (the copies, their events and waits) is not a memory operation,
// and no other buffer's allocation or free moves (a keep/swap plan regenerates nothing). So the
// kept plan's allocations and frees, in the compute stream's one order (Note [Fitting without the
// clock] in memory_replay.cpp), are the swapped plan's without the forward copy's free and the
// prefetched copy's allocation, the prefetched copy's free releasing the forward copy's block.
// One difference: frees after the same instruction come in buffer id order, and the kept copy's
// id is the forward one's; with no allocation between them, the arena's free blocks after such a
// run of frees do not depend on their order (neighbours coalesce), so neither does any later
// placement. (The caching allocator is not checked here: rebase() declines it.)
// tests/search/oracle/evaluator_test.cpp and tests/property/oracle_test.cpp compare the answers
// Evaluator::fits finds this way with a lowering and a simulation of the changed plan.
KeepCheck::KeepCheck(const sim::Workload& workload) : workload_(&workload) {}

bool KeepCheck::rebase(const sim::Plan& plan, sim::Lowerer& lowerer, const sim::Machine& machine) {
  ready_ = false;
  machine_ = machine;
  if (machine_.allocator != sim::AllocatorModel::kArena || plan.host_update ||
      !plan.host_tensors.empty()) {
    return false;
  }
  for (const sim::Decision& d : plan.decisions) {
    if (d.action != sim::Action::kKeep && d.action != sim::Action::kSwap) return false;
    if (d.release_before != sim::kNoOp) return false;
  }
  lowerer.lower(plan, program_);
  ops_.clear();
  for (const sim::Instruction& in : program_.stream(sim::StreamId::kCompute)) {
    if (in.kind == sim::InstrKind::kAlloc || in.kind == sim::InstrKind::kFree)
      ops_.push_back({in.buffer, in.op, in.kind == sim::InstrKind::kAlloc});
  }
  // The decision of each tensor, to find the swapped maps' copies.
  std::vector<std::int32_t> decision_of(workload_->tensors.size(), -1);
  for (std::size_t m = 0; m < plan.decisions.size(); ++m)
    decision_of[index(plan.decisions[m].tensor)] = static_cast<std::int32_t>(m);
  swapped_.assign(plan.decisions.size(), Swapped{});
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const sim::Buffer& b = program_.buffers[index(ops_[i].buffer)];
    if (b.role != sim::BufferRole::kTensor || b.tensor == sim::kNoTensor) continue;
    const std::int32_t m = decision_of[index(b.tensor)];
    if (m < 0 || plan.decisions[static_cast<std::size_t>(m)].action != sim::Action::kSwap) continue;
    Swapped& s = swapped_[static_cast<std::size_t>(m)];
    const auto pos = static_cast<std::int32_t>(i);
    if (s.forward == sim::kNoBuffer) {
      if (!ops_[i].alloc) return false;
      s.forward = ops_[i].buffer;
    } else if (s.forward_free < 0) {
      if (ops_[i].alloc || ops_[i].buffer != s.forward) return false;
      s.forward_free = pos;
    } else if (s.fetch_alloc < 0) {
      if (!ops_[i].alloc) return false;
      s.fetched = ops_[i].buffer;
      s.fetch_alloc = pos;
    } else if (ops_[i].alloc || ops_[i].buffer != s.fetched) {
      return false;  // a third copy, or an unexpected order: not the shape the Note describes
    }
  }
  ready_ = true;
  return true;
}

std::optional<Evaluation> KeepCheck::check(const std::vector<int>& keep, Scratch& scratch) const {
  MEMPLAN_CHECK(ready_, "KeepCheck::check after a rebase that accepted the plan");
  for (int m : keep) {
    const Swapped& s = swapped_[static_cast<std::size_t>(m)];
    if (s.fetch_alloc < 0 || s.forward_free < 0) return std::nullopt;
  }
  // A scratch first used, or last used on a smaller base, starts with nothing skipped and every
  // buffer freeing its own block.
  scratch.skip_.resize(ops_.size(), 0);
  for (std::size_t b = scratch.alias_.size(); b < program_.buffers.size(); ++b)
    scratch.alias_.push_back(sim::buffer_id(b));
  for (int m : keep) {
    const Swapped& s = swapped_[static_cast<std::size_t>(m)];
    scratch.skip_[static_cast<std::size_t>(s.forward_free)] = 1;
    scratch.skip_[static_cast<std::size_t>(s.fetch_alloc)] = 1;
    scratch.alias_[index(s.fetched)] = s.forward;
  }
  Evaluation e;
  scratch.replay_.begin(machine_, program_, e);
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    if (scratch.skip_[i] != 0) continue;
    const MemoryOp& op = ops_[i];
    if (op.alloc) {
      if (!scratch.replay_.allocate(op.buffer, op.op, e)) break;
    } else {
      scratch.replay_.release(scratch.alias_[index(op.buffer)]);
    }
  }
  scratch.replay_.end(e);
  for (int m : keep) {
    const Swapped& s = swapped_[static_cast<std::size_t>(m)];
    scratch.skip_[static_cast<std::size_t>(s.forward_free)] = 0;
    scratch.skip_[static_cast<std::size_t>(s.fetch_alloc)] = 0;
    scratch.alias_[index(s.fetched)] = s.fetched;
  }
  return e;
}

}  // namespace memplan::search
