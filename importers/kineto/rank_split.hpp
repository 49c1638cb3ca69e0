#pragma once
// Which rank of a job each event of a profiler file belongs to (Note [Ranks of a file] in
// rank_split.cpp): a file the profiler wrote holds one rank, a merged file (TraceLens) several,
// told apart by their process ids. Also the file's `distributedInfo`, and each rank's place in the
// job once its events are read.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/collective.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

class RankSplit {
 public:
  /// Groups the pids of `events` into ranks; `distributed_info`: the file has distributedInfo.
  RankSplit(const nlohmann::json& events, std::string_view source, bool distributed_info);

  /// How many ranks the file holds (at least one).
  [[nodiscard]] std::size_t ranks() const { return ranks_.size(); }
  /// The rank number the file gives part `i`, nullopt when it gives none.
  [[nodiscard]] std::optional<std::int32_t> rank(std::size_t i) const { return ranks_[i]; }
  /// The part an event belongs to; nullopt for an event of a pid that no rank holds.
  [[nodiscard]] std::optional<std::size_t> part_of(const nlohmann::json& event) const;
  /// Which rule told the ranks apart, for the report ("distributedInfo", "the metadata's rank").
  [[nodiscard]] const std::string& rule() const { return rule_; }

 private:
  bool by_metadata(const nlohmann::json& events, std::string_view source);
  bool by_steps(const nlohmann::json& events, std::string_view source);

  std::vector<std::optional<std::int32_t>> ranks_{std::nullopt};
  std::unordered_map<std::string, std::size_t> part_of_pid_;  // empty: one part, every event
  std::string rule_ = "one process";
};

/// The top-level `distributedInfo` ({"backend": "nccl", "rank": 3, "world_size": 8}); nullopt
/// when absent. Throws InputError at `$.distributedInfo.<field>` for a malformed one.
std::optional<sim::Distributed> read_distributed_info(const nlohmann::json& document,
                                                      std::string_view source);

/// The trace's place in its job, once its events are read: the file's `distributedInfo`, else
/// `rank` (the merged file's) and what its collectives say (their "Rank", "Group size", the
/// library); `file_ranks`: how many ranks the file held. Leaves a single-GPU step (no collective,
/// no rank given) without one.
void settle_distributed(KinetoTrace& trace, std::optional<std::int32_t> rank,
                        std::size_t file_ranks);

}  // namespace memplan::importers::detail
