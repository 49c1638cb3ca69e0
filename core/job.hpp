#pragma once
// Job: one step of a training job that ran on several GPUs, as the ranks recorded it — one
// Workload per rank in rank order (trace format v3). A job of one Workload whose `distributed`
// names a larger world is a single rank whose peers are assumed alike: each of its collectives
// starts when it reaches it, as every peer would at the same time.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/workload.hpp"

namespace memplan::sim {

struct Job {
  std::vector<Workload> ranks;

  /// The job's world size: the ranks' `distributed.world_size`, or 1 for a single-GPU step.
  [[nodiscard]] std::int32_t world_size() const;
  /// The global rank of ranks[i].
  [[nodiscard]] std::int32_t rank_of(std::size_t i) const;

  friend bool operator==(const Job&, const Job&) = default;
};

/// Checks every rank (validate()) and what ties them: at least one rank, ranks distinct and in
/// order, one world size, one backend, and every collective of a group called by each rank of
/// the group that the job holds, with the same kind and sizes each place (a rank that skips a
/// collective would hang the real job). Throws InputError naming `source`, the rank and the op.
void validate(const Job& job, std::string_view source);

}  // namespace memplan::sim
