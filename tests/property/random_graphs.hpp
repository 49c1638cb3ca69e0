#pragma once
// Random training graphs and plans for the property tests (fixed seeds): forward DAGs with skip
// connections and in-place ops, a backward pass that reads random forward tensors, an optimizer
// update; plans of every action (keep, swap with random prefetch and release points, recompute,
// encodings) with host placement in a third of them. Shared by the engine's and the oracle's
// property tests, so both see the same graphs.
#include <cstdint>
#include <random>

#include "core/plan.hpp"
#include "core/workload.hpp"

namespace memplan::test {

using Rng = std::mt19937_64;

/// A draw in [lo, hi].
std::int64_t uniform(Rng& rng, std::int64_t lo, std::int64_t hi);
/// A validated random workload.
sim::Workload random_workload(Rng& rng);
/// A random plan that validate_plan accepts for `w`.
sim::Plan random_plan(const sim::Workload& w, Rng& rng);

}  // namespace memplan::test
