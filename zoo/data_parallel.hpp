#pragma once
// Data parallelism for the zoo's steps (issue 35): one modeled step turned into the step of each
// rank of a job that trains it on N GPUs, with the collectives and the memory that PyTorch's
// DistributedDataParallel or FullyShardedDataParallel add (Note [Data-parallel steps] in
// data_parallel.cpp). Every rank runs the same step on its share of the global batch (the step
// given is one rank's); the collectives are priced on an interconnect (core/collective_cost.hpp)
// and the job simulates like any recorded one (`memplan simulate JOB`), what-ifs included.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/interconnect.hpp"
#include "core/job.hpp"
#include "core/workload.hpp"

namespace memplan::zoo {

struct DataParallel {
  enum class Strategy : std::uint8_t {
    kDdp,          // DistributedDataParallel: replicated state, gradients all-reduced in buckets
    kFullShard,    // FSDP FULL_SHARD / ZeRO-3: parameters gathered for forward, again for backward
    kShardGradOp,  // FSDP SHARD_GRAD_OP / ZeRO-2: gathered once, kept until backward
  };
  Strategy strategy = Strategy::kDdp;
  std::int32_t world_size = 1;
  /// FSDP: how many units ahead a unit's all-gather is issued (FSDP's forward and backward
  /// prefetch; 0: when the unit starts).
  std::int32_t prefetch = 1;
  /// DDP: bucket_cap_mb's bytes, and the first bucket's (dist._DEFAULT_FIRST_BUCKET_BYTES).
  sim::Bytes bucket_bytes = sim::Bytes{25} << 20;
  sim::Bytes first_bucket_bytes = sim::Bytes{1} << 20;
};

/// "ddp", "fsdp full-shard", "fsdp shard-grad-op".
std::string_view to_string(DataParallel::Strategy strategy);

/// The FSDP unit a parameter belongs to (a wrap policy of one unit per repeated block): its name
/// up to its first component of digits only ("h.3.attn.c_attn.weight" -> "h.3",
/// "layer1.0.conv1.weight" -> "layer1.0"), else up to its first component that ends in a digit
/// ("encoder.layers.encoder_layer_3.ln_1.weight" -> "encoder.layers.encoder_layer_3"); "" (the
/// root unit) for a name with neither ("wte", "fc.weight").
std::string fsdp_unit(std::string_view parameter);

/// "fsdp full-shard over 8 ranks (prefetch 1) on nvlink4": what a job of `dp` on `net` is.
std::string describe(const DataParallel& dp, const sim::Interconnect& net);

/// The fabric between the GPUs of a node of `device` (a zoo preset's name) as its vendor builds
/// the 8-GPU servers it sells (A100: NVLink 3, H100 and GH200: NVLink 4, B200: NVLink 5, MI300X:
/// Infinity Fabric), a core/interconnect.hpp preset; nullopt for the older GPUs, whose servers
/// differ (name one: --interconnect).
std::optional<std::string_view> default_fabric(std::string_view device);

/// The step of rank 0 of `step` (one rank's modeled step, validated, with one update op) trained
/// with `dp` on `net`, as a job of that one rank whose peers are alike (core/job.hpp). Throws
/// InputError for a world size below 2 or a step without an update.
sim::Job data_parallel_job(const sim::Workload& step, const DataParallel& dp,
                           const sim::Interconnect& net);

}  // namespace memplan::zoo
