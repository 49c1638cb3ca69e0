// PyTorch's memory-budget partitioner: under `torch.compile`, AOTAutograd's min-cut partitioner
// (torch/_functorch/partitioners.py, `choose_saved_values_set`) chooses what the compiled forward
// saves for backward, and `torch._functorch.config.activation_memory_budget` (0 to 1) trades
// saved bytes for recomputation.
//
// Note [The memory-budget partitioner in a plan]
// PyTorch's rule, as of 2.15:
//   - budget 1: the default min-cut, which recomputes the cheap pointwise ops (its allowlist) and
//     saves the rest;
//   - budget 0: save only the graph's inputs, recompute everything;
//   - between: with a budget normalised between those two saved sizes, if recomputing every op but
//     the compute-intensive ones (matmuls, convolution, attention) already fits, that; else a 0/1
//     knapsack over the compute-intensive ops' outputs (sizes normalised, quantised to 1/10,000;
//     value: the op's FLOPs; the `dp` solver, largest first) chooses which to save, and every
//     other op may be recomputed.
// In a plan, with memplan's feature maps as the saved values: at budget 1 every map a pointwise
// op writes (OpKind::kPointwise) is recomputed and the others kept; the inputs' size is that of
// the maps nothing can regenerate (kept at every budget); the knapsack's items are the maps
// compute-intensive ops write, valued by the op's FLOPs where the trace has them, else by its
// duration; what it does not save is recomputed. A map memplan cannot regenerate is always kept.
//
// What memplan's emulation leaves out: the min-cut's choice of a cheaper cut through the same
// ops (saving a norm's input instead of its output), its bans on recomputing pointwise chains used
// far apart, and the decompositions inductor makes first. What the partitioner cannot see (and
// memplan can): where in the step the peak is (it bounds saved bytes, not the peak), the
// allocator's fragmentation, copy engines that could swap instead of recompute, and op times as
// they run (FLOPs rank a memory-bound op as free).
//
// In `compare` the row is a user who tunes the knob: budgets 1, 0.9, ..., 0.1, 0, the first
// whose plan fits.
#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

// What the partitioner may do with a map's producer (Note [The memory-budget partitioner in a
// plan]).
enum class Role {
  kInput,             // nothing can regenerate it: saved at every budget
  kPointwise,         // on the recomputable allowlist
  kRandom,            // a random op: banned but at budget 0
  kReduction,         // a reduction's small output (a norm's statistics): banned but at budget 0
  kComputeIntensive,  // the knapsack's items
  kOther,             // recomputable once the allowlist is off
};

Role role_of(const NetworkView& view, int map) {
  const sim::Workload& w = view.workload();
  const sim::Op& producer = w.op(view.producer(map));
  const OpKind kind = op_kind(producer);
  if (kind == OpKind::kPointwise) return Role::kPointwise;
  if (kind == OpKind::kRandom) return Role::kRandom;
  if (compute_intensive(kind)) return Role::kComputeIntensive;
  if (kind == OpKind::kLayoutCopy) {
    // A copy of a matmul's output (the contiguous q and k) goes with the matmul: PyTorch's
    // knapsack weighs the matmul's output, which backward reads through the copy.
    const bool of_compute =
        std::all_of(producer.inputs.begin(), producer.inputs.end(), [&](sim::TensorId t) {
          const sim::OpId from = w.tensor(t).producer;
          return from != sim::kNoOp && compute_intensive(op_kind(w.op(from)));
        });
    if (of_compute && !producer.inputs.empty()) return Role::kComputeIntensive;
  }
  sim::Bytes largest_input = 0;
  for (sim::TensorId t : producer.inputs)
    largest_input = std::max(largest_input, w.tensor(t).bytes);
  if (4 * view.map_bytes(map) <= largest_input) return Role::kReduction;
  return Role::kOther;
}

std::vector<Role> roles(const NetworkView& view) {
  const std::vector<bool> regenerable = sim::regenerable_tensors(view.workload());
  std::vector<Role> out;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    out.push_back(regenerable[sim::index(view.feature_maps()[m].tensor)]
                      ? role_of(view, static_cast<int>(m))
                      : Role::kInput);
  }
  return out;
}

// PyTorch's `dp_knapsack`: items' memory quantised to 1/10,000, the most value within `capacity`
// (also quantised), backtracked from the last item. Returns which items are saved.
std::vector<bool> dp_knapsack(const std::vector<double>& memory, const std::vector<double>& value,
                              double capacity) {
  constexpr double kScale = 10000;
  const auto cap = static_cast<std::size_t>(std::max(0.0, std::round(capacity * kScale)));
  const std::size_t n = memory.size();
  std::vector<std::size_t> weight(n);
  for (std::size_t i = 0; i < n; ++i) {
    weight[i] = static_cast<std::size_t>(std::round(memory[i] * kScale));
  }
  std::vector<double> best(cap + 1, 0.0);
  std::vector<std::vector<bool>> took(n, std::vector<bool>(cap + 1, false));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = cap + 1; j-- > weight[i];) {
      const double with = best[j - weight[i]] + value[i];
      if (with > best[j]) {
        best[j] = with;
        took[i][j] = true;
      }
    }
  }
  std::vector<bool> saved(n, false);
  std::size_t j = cap;
  for (std::size_t i = n; i-- > 0;) {
    if (took[i][j]) {
      saved[i] = true;
      j -= weight[i];
    }
  }
  return saved;
}

}  // namespace

sim::Plan partitioner_plan(const NetworkView& view, double budget) {
  const sim::Workload& w = view.workload();
  const std::vector<Role> role = roles(view);
  sim::Plan plan = keep_all(view, "budget-partitioner");
  if (budget >= 1) return plan;  // the runtime-optimal cut: what eager autograd saves
  const auto bytes = [&](std::size_t m) {
    return static_cast<double>(view.map_bytes(static_cast<int>(m)));
  };
  const auto recompute = [&](std::initializer_list<Role> which) {
    for (std::size_t m = 0; m < role.size(); ++m) {
      if (std::find(which.begin(), which.end(), role[m]) != which.end()) {
        plan.decisions[m].action = sim::Action::kRecompute;
      }
    }
  };
  if (budget <= 0) {  // only the inputs saved
    recompute(
        {Role::kPointwise, Role::kRandom, Role::kReduction, Role::kComputeIntensive, Role::kOther});
    return plan;
  }
  double min_bytes = 0;
  double max_bytes = 0;
  for (std::size_t m = 0; m < role.size(); ++m) {
    max_bytes += bytes(m);
    if (role[m] == Role::kInput) min_bytes += bytes(m);
  }
  const auto ratio = [&] {
    double kept = 0;
    for (std::size_t m = 0; m < role.size(); ++m) {
      if (plan.decisions[m].action == sim::Action::kKeep) kept += bytes(m);
    }
    return (kept - min_bytes) / (max_bytes - min_bytes);
  };
  if (max_bytes <= min_bytes) return plan;
  recompute({Role::kPointwise});  // the allowlist's ops, used far apart or not
  if (ratio() < budget) return plan;
  recompute({Role::kOther});  // the allowlist off: what is banned is random, reductions, matmuls
  if (ratio() < budget) return plan;
  std::vector<std::size_t> items;
  for (std::size_t m = 0; m < role.size(); ++m) {
    if (role[m] == Role::kComputeIntensive) items.push_back(m);
  }
  std::stable_sort(items.begin(), items.end(),
                   [&](std::size_t a, std::size_t b) { return bytes(a) > bytes(b); });
  std::vector<double> memory;
  std::vector<double> value;
  for (std::size_t m : items) {
    const sim::Op& producer = w.op(view.producer(static_cast<int>(m)));
    memory.push_back(bytes(m) / (max_bytes - min_bytes));
    value.push_back(producer.flops
                        ? std::max(*producer.flops, 1.0)
                        : static_cast<double>(std::max<sim::Nanoseconds>(producer.duration_ns, 1)));
  }
  const std::vector<bool> saved = dp_knapsack(memory, value, budget);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!saved[i]) plan.decisions[items[i]].action = sim::Action::kRecompute;
  }
  return plan;
}

PolicyDecision decide_budget_partitioner(Evaluator& evaluator, const NetworkView& view) {
  int tenths = 10;
  sim::Plan plan = partitioner_plan(view, 1.0);
  while (tenths > 0 && !evaluator.cost(plan).feasible) {
    --tenths;
    plan = partitioner_plan(view, tenths / 10.0);
  }
  return {std::move(plan), false, fmt::format("activation_memory_budget {:.1f}", tenths / 10.0)};
}

}  // namespace memplan::search
