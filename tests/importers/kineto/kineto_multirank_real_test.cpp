// Every rank of the real multi-rank jobs in ../shared/data/kineto-multirank imports (README
// there): the four MI300X ranks of the merged DDP file and DLRM's ranks 0 and 1; their
// collectives are counted and matched by process group and sequence across ranks. Skipped, with a
// message, where ../shared is absent.
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "importers/kineto/kineto_job.hpp"

using namespace memplan;

namespace {

const std::filesystem::path kMultirankDir =
    std::filesystem::path(MEMPLAN_SOURCE_DIR) / "../shared/data/kineto-multirank";

#define SKIP_WITHOUT(path)                                                                 \
  if (!std::filesystem::exists(path)) {                                                    \
    WARN((path).string() << " is not present (../shared beside the repository): skipped"); \
    return;                                                                                \
  }

// Per (group, sequence): the kind and the input bytes each rank gave it.
using Calls = std::map<std::pair<std::string, std::int64_t>,
                       std::vector<std::tuple<std::int32_t, sim::CollectiveKind, sim::Bytes>>>;

Calls calls_of(const sim::Job& job) {
  Calls calls;
  for (const sim::Workload& w : job.ranks) {
    for (const sim::Op& o : w.ops) {
      if (o.collective)
        calls[{o.collective->group, o.collective->sequence}].emplace_back(
            w.distributed->rank, o.collective->kind, o.collective->in_bytes);
    }
  }
  return calls;
}

}  // namespace

TEST_CASE("real job: the four MI300X ranks of one merged DDP file",
          "[importers][kineto][multirank][real]") {
  const auto file = kMultirankDir / "mi300x_resnet_ddp_4ranks_merged.json.gz";
  SKIP_WITHOUT(file);
  const auto traces = importers::read_kineto_job({file});
  REQUIRE(traces.size() == 4);
  const auto r = importers::import_kineto_job(traces);
  REQUIRE(r.job.ranks.size() == 4);
  for (std::size_t k = 0; k < 4; ++k) {
    const sim::Workload& w = r.job.ranks[k];
    const auto& report = r.reports[k];
    CAPTURE(k);
    CHECK(w.distributed->rank == static_cast<std::int32_t>(k));
    CHECK(w.distributed->world_size == 4);
    CHECK(w.distributed->backend == "rccl");
    // ProfilerStep#11 is cut off: of #9 (49.0 ms) and #10 (44.8 ms), the lower median.
    CHECK(report.step.number == 10);
    CHECK(w.streams == std::vector<std::string>{"compute (stream 0)", "rccl (stream 4)"});
    CHECK(report.collectives == 7);  // DDP's two buffer broadcasts, five gradient buckets
    CHECK(report.wait_rule == "the recorded cudaStreamWaitEvent calls");
    CHECK(report.backward_ops > 100);
    // The optimizer waits for the last bucket's all-reduce, the first conv for the broadcasts.
    const auto update = std::find_if(w.ops.begin(), w.ops.end(), [](const sim::Op& o) {
      return o.phase == sim::Phase::kUpdate;
    });
    REQUIRE(update != w.ops.end());
    REQUIRE(update->after.size() == 1);
    CHECK(w.op(update->after.front()).name == "all_reduce_5");
    CHECK(report.collective_transfer_ns < report.collective_recorded_ns);
  }
  const Calls calls = calls_of(r.job);
  CHECK(calls.size() == 7);
  for (const auto& [key, ranks] : calls) {
    CAPTURE(key.first, key.second);
    REQUIRE(ranks.size() == 4);
    for (const auto& [rank, kind, bytes] : ranks) {
      CHECK(kind == std::get<1>(ranks.front()));
      CHECK(bytes == std::get<2>(ranks.front()));
    }
  }
}

TEST_CASE("real job: DLRM's ranks 0 and 1 of 8, all-to-all and all-reduce",
          "[importers][kineto][multirank][real]") {
  const auto rank0 = kMultirankDir / "dlrm_v100_ddp_rank0.pt.trace.json.gz";
  const auto rank1 = kMultirankDir / "dlrm_v100_ddp_rank1.pt.trace.json.gz";
  SKIP_WITHOUT(rank0);
  const auto r = importers::import_kineto_job(std::vector<std::filesystem::path>{rank1, rank0});
  REQUIRE(r.job.ranks.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const sim::Workload& w = r.job.ranks[k];
    const auto& report = r.reports[k];
    CAPTURE(k);
    CHECK(w.distributed->rank == static_cast<std::int32_t>(k));
    CHECK(w.distributed->world_size == 8);
    CHECK(report.step.number == 10);
    CHECK(report.collectives == 8);
    CHECK(w.streams.size() == 3);
    CHECK(w.streams.back() == "nccl (stream 84)");
    CHECK(report.wait_rule == "the recorded cudaStreamWaitEvent calls");
  }
  // The waits differ: rank 1 recorded 5.6 ms more than the least of the two.
  CHECK(r.reports[0].collective_transfer_ns == r.reports[1].collective_transfer_ns);
  CHECK(r.reports[1].collective_recorded_ns > r.reports[0].collective_recorded_ns);
  const Calls calls = calls_of(r.job);
  CHECK(calls.size() == 8);
  std::map<sim::CollectiveKind, int> kinds;
  for (const auto& [key, ranks] : calls) {
    REQUIRE(ranks.size() == 2);
    CHECK(std::get<1>(ranks[0]) == std::get<1>(ranks[1]));
    ++kinds[std::get<1>(ranks[0])];
  }
  CHECK(kinds[sim::CollectiveKind::kAllToAll] == 5);
  CHECK(kinds[sim::CollectiveKind::kAllReduce] == 3);
}
