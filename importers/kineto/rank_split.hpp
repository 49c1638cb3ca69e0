#pragma once
// Which rank of a job each event of a profiler file belongs to (Note [Ranks of a file] in
// rank_split.cpp): a file the profiler wrote holds one rank, a merged file (TraceLens) several,
// told apart by their process ids. Also the file's `distributedInfo`, and each rank's place in the
// job once its events are read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/collective.hpp"
#include "core/input_error.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

class RankSplit {
 public:
  /// `source` names the file in errors.
  explicit RankSplit(std::string_view source) : source_(source) {}

  /// Notes what the split needs of the `index`th event (its pid, a metadata event's rank, a
  /// ProfilerStep#N, a device activity, an ac2g flow), as the events stream.
  /// `pid` is pid_of(event), which the caller has computed already.
  void observe(const nlohmann::json& event, const std::optional<std::string>& pid,
               std::size_t index);
  /// Groups the pids into ranks once every event was observed; `distributed_info`: the file has
  /// distributedInfo. Throws InputError on a metadata rank that is implausible or contradicts an
  /// earlier one, when the metadata decides.
  void decide(bool distributed_info);

  /// How many ranks the file holds (at least one).
  [[nodiscard]] std::size_t ranks() const { return ranks_.size(); }
  /// The rank number the file gives part `i`, nullopt when it gives none.
  [[nodiscard]] std::optional<std::int32_t> rank(std::size_t i) const { return ranks_[i]; }
  /// The part the events of `pid` belong to (nullopt: the events without a pid); nullopt for a
  /// pid that no rank holds.
  [[nodiscard]] std::optional<std::size_t> part_of(const std::optional<std::string>& pid) const;
  /// Which rule told the ranks apart, for the report ("distributedInfo", "the metadata's rank").
  [[nodiscard]] const std::string& rule() const { return rule_; }

  /// An event's pid as text; nullopt when absent or of another type.
  [[nodiscard]] static std::optional<std::string> pid_of(const nlohmann::json& event);

 private:
  bool by_metadata();
  bool by_steps();
  std::size_t pid_number(const std::string& pid);

  std::string source_;
  std::vector<std::string> pids_;                             // in order of appearance
  std::unordered_map<std::string, std::size_t> pid_numbers_;  // pid -> its place in pids_
  // Rule 2: the rank each pid's metadata names.
  std::map<std::size_t, std::int32_t> rank_of_pid_;
  std::optional<sim::InputError> metadata_error_;  // the first bad metadata rank
  // Rule 3: the pids with steps of their own, the device pids, the ac2g flows (id -> starts
  // (pid, ts); ends (device pid, id, ts)).
  std::set<std::size_t> step_pids_;
  std::set<std::size_t> device_pids_;
  std::map<std::int64_t, std::vector<std::pair<std::size_t, double>>> flow_starts_;
  std::vector<std::tuple<std::size_t, std::int64_t, double>> flow_ends_;

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
