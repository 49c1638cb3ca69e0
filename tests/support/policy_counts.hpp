#pragma once
// How many rows a comparison of a workload has: every policy, but FSDP's settings only on a
// workload whose parameters are gathered (search::policies_for).
#include <algorithm>
#include <cstddef>

#include "search/policies/policy.hpp"

namespace memplan::test {

/// The policies of a workload without gathered parameters (a single GPU's, DDP's).
inline std::size_t unsharded_policy_count() {
  const auto& all = memplan::search::policies();
  return static_cast<std::size_t>(std::count_if(
      all.begin(), all.end(), [](const memplan::search::Policy& p) { return !p.fsdp_setting; }));
}

}  // namespace memplan::test
