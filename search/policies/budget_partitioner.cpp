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

enum class Role { kInput, kPointwise, kComputeIntensive, kOther };

std::vector<Role> roles(const NetworkView& view) {
  const sim::Workload& w = view.workload();
  const std::vector<bool> regenerable = sim::regenerable_tensors(w);
  std::vector<Role> out;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    const auto map = static_cast<int>(m);
    if (!regenerable[sim::index(view.feature_maps()[m].tensor)]) {
      out.push_back(Role::kInput);
      continue;
    }
    const OpKind kind = op_kind(w.op(view.producer(map)));
    out.push_back(kind == OpKind::kPointwise ? Role::kPointwise
                  : compute_intensive(kind)  ? Role::kComputeIntensive
                                             : Role::kOther);
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
  const auto bytes = [&](int m) { return static_cast<double>(view.map_bytes(m)); };
  double min_bytes = 0;
  double max_bytes = 0;
  double compute_bytes = 0;
  std::vector<int> items;
  for (std::size_t m = 0; m < role.size(); ++m) {
    const auto map = static_cast<int>(m);
    if (role[m] == Role::kInput) min_bytes += bytes(map);
    if (role[m] != Role::kPointwise) max_bytes += bytes(map);
    if (role[m] == Role::kComputeIntensive) {
      compute_bytes += bytes(map);
      items.push_back(map);
    }
  }
  const auto recompute = [&](auto which) {
    for (std::size_t m = 0; m < role.size(); ++m) {
      if (role[m] != Role::kInput && which(static_cast<int>(m))) {
        plan.decisions[m].action = sim::Action::kRecompute;
      }
    }
  };
  if (budget <= 0) {
    recompute([](int) { return true; });
    return plan;
  }
  recompute([&](int m) { return role[static_cast<std::size_t>(m)] == Role::kPointwise; });
  if (budget >= 1 || max_bytes <= min_bytes) return plan;
  const double range = max_bytes - min_bytes;
  recompute([&](int m) { return role[static_cast<std::size_t>(m)] == Role::kOther; });
  if (compute_bytes / range < budget) return plan;  // recomputing all but the heavy ops fits
  std::stable_sort(items.begin(), items.end(), [&](int a, int b) { return bytes(a) > bytes(b); });
  std::vector<double> memory;
  std::vector<double> value;
  for (int m : items) {
    const sim::Op& producer = w.op(view.producer(m));
    memory.push_back(bytes(m) / range);
    value.push_back(producer.flops
                        ? std::max(*producer.flops, 1.0)
                        : static_cast<double>(std::max<sim::Nanoseconds>(producer.duration_ns, 1)));
  }
  const std::vector<bool> saved = dp_knapsack(memory, value, budget);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!saved[i])
      plan.decisions[static_cast<std::size_t>(items[i])].action = sim::Action::kRecompute;
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
