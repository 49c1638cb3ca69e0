#pragma once
// Hand-made profiler traces of the ranks of a data-parallel job, for the importer's tests of
// collectives, device streams and jobs: synthetic_kineto()'s step (current format) with, after
// its last backward op, DDP's all-reduce of the gradients on the autograd thread
// (`record_param_comms` around `nccl:all_reduce`, whose kernel runs on NCCL's stream 20 for a
// recorded time of the rank's choosing), DDP's finalize (a cudaStreamWaitEvent after it, or a
// recorded cuda_sync wait, or nothing), and optionally a kernel beside the compute stream.
// merge_ranks() merges such files as TraceLens does: each rank's pids offset, and metadata events
// naming each pid's rank (or not).
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::test {

struct SyntheticRank {
  int rank = 0;
  int world_size = 2;
  int steps = 1;
  std::vector<int> step_idle_us;       // as SyntheticOptions::step_idle_us
  std::int64_t allreduce_us = 500;     // the all-reduce kernel's recorded duration
  std::int64_t allreduce_nelems = 50;  // floats
  bool distributed_info = true;        // the top-level distributedInfo
  bool collective_args = true;         // false: record_param_comms without "Collective name"
  enum class Wait : std::uint8_t { kCall, kSyncEvent, kNone } wait = Wait::kCall;
  bool side_kernel = false;  // the first relu_ launches a second kernel on stream 13
  bool memory = true;        // [memory] events
};

/// One rank's trace.
nlohmann::json synthetic_rank(const SyntheticRank& options);

/// The ranks merged into one file; `rank_metadata`: metadata events name each pid's rank. Rank
/// r's pids are offset by (r + 1) * 1000 and its clock by r * 100 ms.
nlohmann::json merge_ranks(const std::vector<nlohmann::json>& ranks, bool rank_metadata);

}  // namespace memplan::test
