#pragma once
// DataParallelRequest: how many GPUs a zoo step trains on and how (zoo/data_parallel.hpp), as the
// CLI's flags (--data-parallel, --fsdp, --fsdp-strategy, --fsdp-prefetch, --interconnect,
// --network, --gpus-per-node on `memplan zoo`) and the Python zoo()'s keywords give them. Checked
// here and nowhere else, so that both accept the same values and name a bad one by its flag.
#include <cstdint>
#include <optional>
#include <string>

#include "core/job.hpp"
#include "core/workload.hpp"

namespace memplan::requests {

struct DataParallelRequest {
  std::optional<std::int64_t> data_parallel;  // DDP over N ranks
  std::optional<std::int64_t> fsdp;           // FSDP over N ranks
  std::optional<std::string> fsdp_strategy;   // full-shard (default) or shard-grad-op
  std::optional<std::int64_t> fsdp_prefetch;  // units ahead (default 1)
  std::optional<std::string> interconnect;    // an intra-node fabric preset
  std::optional<std::string> network;         // a network preset between nodes
  std::optional<std::int64_t> gpus_per_node;

  /// Whether it asks for data parallelism at all; throws InputError for a flag that needs
  /// another one not given (an FSDP option without --fsdp, a fabric without either).
  [[nodiscard]] bool wanted() const;
};

struct DataParallelJob {
  sim::Job job;
  std::string description;  // zoo::describe's
  /// Rank 0's peak under the in-core plan as the job runs it: every activation kept, the gathered
  /// parameters as its FSDP setting has them (core/fsdp_setting.hpp), simulated with room for
  /// anything.
  sim::Bytes incore_peak_bytes = 0;
};

/// Rank 0's step of `step`, the zoo's step of one GPU of the zoo preset `device`, trained as
/// `request` asks (zoo::data_parallel_job), validated. Throws InputError naming the flag.
DataParallelJob data_parallel_job(const sim::Workload& step, const std::string& device,
                                  const DataParallelRequest& request);

}  // namespace memplan::requests
