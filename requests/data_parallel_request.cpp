#include "requests/data_parallel_request.hpp"

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "core/interconnect.hpp"
#include "sim/simulation.hpp"
#include "zoo/data_parallel.hpp"

namespace memplan::requests {

namespace {

std::int32_t ranks(std::int64_t n, const char* flag) {
  if (n < 2 || n > (std::int64_t{1} << 20)) {
    throw sim::InputError(flag, fmt::format("{} ranks: data parallelism takes 2 to 1048576", n));
  }
  return static_cast<std::int32_t>(n);
}

}  // namespace

bool DataParallelRequest::wanted() const {
  if (data_parallel && fsdp)
    throw sim::InputError("--fsdp", "give --data-parallel or --fsdp, not both");
  if (!fsdp) {
    if (fsdp_strategy)
      throw sim::InputError("--fsdp-strategy", "applies to --fsdp, which is not given");
    if (fsdp_prefetch)
      throw sim::InputError("--fsdp-prefetch", "applies to --fsdp, which is not given");
  }
  if (!data_parallel && !fsdp) {
    for (const auto& [given, flag] : {std::pair{interconnect.has_value(), "--interconnect"},
                                      std::pair{network.has_value(), "--network"},
                                      std::pair{gpus_per_node.has_value(), "--gpus-per-node"}}) {
      if (given) {
        throw sim::InputError(flag,
                              "prices the collectives of --data-parallel or --fsdp, neither given");
      }
    }
    return false;
  }
  return true;
}

DataParallelJob data_parallel_job(const sim::Workload& step, const std::string& device,
                                  const DataParallelRequest& request) {
  zoo::DataParallel dp;
  if (request.data_parallel) {
    dp.world_size = ranks(*request.data_parallel, "--data-parallel");
  } else {
    dp.world_size = ranks(*request.fsdp, "--fsdp");
    const std::string strategy = request.fsdp_strategy.value_or("full-shard");
    if (strategy == "full-shard") {
      dp.strategy = zoo::DataParallel::Strategy::kFullShard;
    } else if (strategy == "shard-grad-op") {
      dp.strategy = zoo::DataParallel::Strategy::kShardGradOp;
    } else {
      throw sim::InputError("--fsdp-strategy",
                            fmt::format("'{}' is not full-shard or shard-grad-op", strategy));
    }
    const std::int64_t prefetch = request.fsdp_prefetch.value_or(1);
    if (prefetch < 0 || prefetch > (std::int64_t{1} << 20)) {
      throw sim::InputError("--fsdp-prefetch", fmt::format("{} units: 0 or more", prefetch));
    }
    dp.prefetch = static_cast<std::int32_t>(prefetch);
  }
  std::string fabric = request.interconnect.value_or("");
  if (fabric.empty()) {
    const auto preset = zoo::default_fabric(device);
    if (!preset) {
      throw sim::InputError(
          "--interconnect",
          fmt::format("name the fabric between the {} GPUs of a node (one of: {})", device,
                      sim::fabric_preset_names(false)));
    }
    fabric = std::string(*preset);
  }
  const std::int64_t per_node = request.gpus_per_node.value_or(sim::kDefaultGpusPerNode);
  if (per_node < 1 || per_node > sim::kMaxGpusPerNode) {
    throw sim::InputError("--gpus-per-node",
                          fmt::format("{}: 1 to {}", per_node, sim::kMaxGpusPerNode));
  }
  const sim::Interconnect net = sim::make_interconnect(
      fabric, request.network ? std::optional<std::string_view>(*request.network) : std::nullopt,
      static_cast<std::int32_t>(per_node));
  DataParallelJob out{zoo::data_parallel_job(step, dp, net), zoo::describe(dp, net)};
  sim::validate(out.job, "the " + out.description);
  const sim::Workload& rank = out.job.ranks.front();
  sim::Machine unlimited;
  unlimited.memory_bytes = sim::kMaxBytes;
  out.incore_peak_bytes =
      sim::simulate_plan(rank, *sim::basic_plan("in-core", rank), unlimited).timeline.peak_bytes;
  return out;
}

}  // namespace memplan::requests
