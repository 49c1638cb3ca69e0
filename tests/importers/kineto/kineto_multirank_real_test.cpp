// Every rank of the real multi-rank jobs in ../shared/data/kineto-multirank imports (README
// there): the four MI300X ranks of the merged DDP file and DLRM's ranks 0 and 1; their
// collectives are counted and matched by process group and sequence across ranks. Skipped, with a
// message, where ../shared is absent. And the FSDP2 and FSDP1 steps shipped in traces/fsdp-cpu
// (two CPU processes over gloo), read as FSDP's (Note [FSDP in a trace]).
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/fsdp_setting.hpp"
#include "core/machine.hpp"
#include "core/plan.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "importers/kineto/recorded_step.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "sim/job_simulation.hpp"

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

namespace {

// The ops of `w` running collectives of `kind`.
std::vector<const sim::Op*> collectives_of(const sim::Workload& w, sim::CollectiveKind kind) {
  std::vector<const sim::Op*> out;
  for (const sim::Op& o : w.ops) {
    if (o.collective && o.collective->kind == kind) out.push_back(&o);
  }
  return out;
}

// Note [Gathered parameters as feature maps]: the root's and each block's gathered parameters are
// one feature map of its forward all-gather (the root's 38,440 bytes, each block's 527,872), read
// by the unit's forward and backward layer ops and by no parameter; the backward's re-gathers are
// gone, the trace's setting recorded (FSDP2's default: reshard after forward, prefetch 1); the
// in-core plan keeps the root and regathers each block, issued one unit ahead.
void check_gathered_maps(const sim::Workload& w) {
  std::set<sim::TensorId> layer_reads;
  for (const sim::Op& o : w.ops) {
    if (!o.collective && o.phase != sim::Phase::kUpdate)
      layer_reads.insert(o.inputs.begin(), o.inputs.end());
  }
  for (sim::TensorId t : layer_reads) CHECK(w.tensor(t).kind != sim::TensorKind::kParameter);
  const auto maps = sim::find_feature_maps(w);
  const auto units = sim::gathered_parameter_maps(maps, w);
  REQUIRE(units.size() == 3);
  std::multiset<sim::Bytes> bytes;
  for (std::size_t m : units) {
    const sim::Tensor& t = w.tensor(maps[m].tensor);
    CAPTURE(t.name);
    CHECK_FALSE(t.lifetime_only);
    CHECK(w.op(t.producer).phase == sim::Phase::kForward);
    CHECK(maps[m].forward_uses.size() >= 2);  // the root: the first linear and the head
    CHECK(maps[m].backward_uses.size() >= 2);
    bytes.insert(t.bytes);
  }
  CHECK(bytes == std::multiset<sim::Bytes>{38440, 527872, 527872});
  REQUIRE(w.distributed);
  REQUIRE(w.distributed->fsdp);
  CHECK(*w.distributed->fsdp == sim::FsdpSetting{true, 1});
  sim::Plan plan = sim::in_core_plan(w);
  sim::apply_workload_fsdp_setting(plan, w);
  std::vector<sim::OpId> issued;
  for (std::size_t m : units) {
    const sim::Decision& d = plan.decisions[m];
    if (d.action == sim::Action::kKeep) continue;
    CHECK(d.action == sim::Action::kRecompute);
    REQUIRE(d.prefetch_before != sim::kNoOp);
    CHECK(d.prefetch_before > sim::last_forward_use(maps[m], w));
    CHECK(d.prefetch_before < maps[m].backward_uses.front());
    issued.push_back(d.prefetch_before);
  }
  CHECK(issued.size() == 2);  // the blocks, not the root
  sim::validate_plan(plan, w, "the in-core plan");
}

struct FsdpImport {
  importers::JobImportResult import;
  std::vector<importers::KinetoTrace> traces;
  std::vector<sim::Bytes> incore_peaks;  // above the shards and Adam's state, per rank
};

// traces/fsdp-cpu/`folder`'s ranks imported, each rank's in-core plan with the job's FSDP setting
// simulated together.
FsdpImport import_fsdp_cpu(const std::string& folder) {
  FsdpImport f;
  f.traces = importers::read_kineto_job(
      {std::filesystem::path(MEMPLAN_SOURCE_DIR) / "traces" / "fsdp-cpu" / folder});
  f.import = importers::import_kineto_job(f.traces);
  std::vector<sim::Plan> plans;
  for (const sim::Workload& w : f.import.job.ranks) {
    plans.push_back(sim::in_core_plan(w));
    sim::apply_workload_fsdp_setting(plans.back(), w);
  }
  sim::Machine machine;
  machine.memory_bytes = sim::Bytes{1} << 30;
  const sim::JobRun run = sim::simulate_job(
      f.import.job, plans, std::vector<sim::Machine>(f.import.job.ranks.size(), machine));
  REQUIRE(run.timeline.feasible);
  for (std::size_t k = 0; k < f.import.job.ranks.size(); ++k) {
    sim::Bytes held = 0;
    for (const sim::Tensor& t : f.import.job.ranks[k].tensors) {
      if (t.kind == sim::TensorKind::kParameter || t.kind == sim::TensorKind::kOptimizerState)
        held += t.bytes;
    }
    f.incore_peaks.push_back(run.timeline.ranks[k].peak_bytes - held);
  }
  return f;
}

}  // namespace

TEST_CASE("real job: an FSDP2 and an FSDP1 step on two CPU processes over gloo (traces/fsdp-cpu)",
          "[importers][kineto][multirank][real][fsdp]") {
  // The in-core peaks measured, the plan regathering the blocks as the trace did (as before the
  // re-gathers became the plan's): FSDP2 +1.7% on both ranks, FSDP1 +2.6% and +2.3%.
  const auto [folder, kind, tolerance] = GENERATE(table<std::string, std::string, double>(
      {{"", "FSDP2 (fully_shard)", 0.02}, {"fsdp1", "FSDP1 (FlatParameter)", 0.03}}));
  CAPTURE(kind);
  const FsdpImport f = import_fsdp_cpu(folder);
  REQUIRE(f.traces.size() == 2);
  const auto& r = f.import;
  REQUIRE(r.job.ranks.size() == 2);
  // Net(128 wide, 2 blocks): 273,546 float32 parameters, every dim 0 even but the head's 10.
  constexpr sim::Bytes kShards = 547092;
  for (std::size_t k = 0; k < 2; ++k) {
    const sim::Workload& w = r.job.ranks[k];
    const auto& report = r.reports[k];
    CAPTURE(k);
    CHECK(report.fsdp == kind);
    CHECK(report.fsdp_shards == 2);
    // Each unit before its forward, each block before its backward; gloo's reduce-scatters are
    // all-reduces, one per unit.
    CHECK(report.fsdp_gathers == 5);
    CHECK(report.fsdp_reductions == 3);
    // The backward's two re-gathers are the plan's to make: a unit's forward gather re-run.
    CHECK(report.fsdp_units == 3);
    CHECK(report.fsdp_regathers == 2);
    CHECK(report.fsdp_unplanned.empty());
    CHECK(collectives_of(w, sim::CollectiveKind::kAllGather).size() == 3);
    const auto reductions = collectives_of(w, sim::CollectiveKind::kAllReduce);
    CHECK(reductions.size() == 3);
    check_gathered_maps(w);
    // The update reads the reductions' shards, not the unsharded gradients.
    const auto update = std::find_if(w.ops.begin(), w.ops.end(), [](const sim::Op& o) {
      return o.phase == sim::Phase::kUpdate;
    });
    REQUIRE(update != w.ops.end());
    for (sim::TensorId t : update->inputs) {
      if (w.tensor(t).kind == sim::TensorKind::kGradient)
        CHECK(w.op(w.tensor(t).producer).collective.has_value());
    }
    sim::Bytes parameters = 0;
    sim::Bytes state = 0;
    for (const sim::Tensor& t : w.tensors) {
      if (t.kind == sim::TensorKind::kParameter) parameters += t.bytes;
      if (t.kind == sim::TensorKind::kOptimizerState) state += t.bytes;
    }
    CHECK(parameters == kShards);
    CHECK(state == 2 * kShards);  // Adam's two moments of each shard
    // The CPU's Total Allocated counts what was allocated since the profiler started: not the
    // shards and Adam's state, which the step holds throughout. What is left: the input batch,
    // 8,448 bytes from before the profiler, and the order of allocations inside an op.
    const auto recorded = importers::measure_recorded_step(f.traces[k], report.step, false);
    REQUIRE(recorded.peak_total_allocated_bytes);
    const auto total = static_cast<double>(*recorded.peak_total_allocated_bytes);
    CHECK(static_cast<double>(f.incore_peaks[k]) == Approx(total).epsilon(tolerance));
    // memplan compare's rows: FSDP's two settings, as for the zoo's sharded steps.
    std::vector<std::string> names;
    for (const auto& p : search::policies_for(search::NetworkView(w))) names.emplace_back(p.name);
    CHECK(std::count(names.begin(), names.end(), "fsdp-full-shard") == 1);
    CHECK(std::count(names.begin(), names.end(), "fsdp-shard-grad-op") == 1);
  }
  // The ranks' collectives still match by (group, sequence): 0 to 5 on each, alike.
  const Calls calls = calls_of(r.job);
  CHECK(calls.size() == 6);
  for (const auto& [key, ranks] : calls) {
    CAPTURE(key.second);
    CHECK(key.second < 6);
    REQUIRE(ranks.size() == 2);
    CHECK(std::get<1>(ranks[0]) == std::get<1>(ranks[1]));
    CHECK(std::get<2>(ranks[0]) == std::get<2>(ranks[1]));
  }
}

TEST_CASE(
    "real job: frees the profiler did not record (traces/fsdp-cpu/lost-frees, "
    "reused-address)",
    "[importers][kineto][multirank][real][fsdp][memory]") {
  // Two more recordings of the step in traces/fsdp-cpu (README.md there), on a loaded machine,
  // where gloo's worker thread let go of a buffer after the training thread: the free has no
  // event (Note [Frees the profiler does not see] in importers/kineto/memory_timeline.hpp).
  // Both import as the step does when every free is recorded: 2,106,408 bytes above the shards
  // and Adam's state on each rank (traces/fsdp-cpu's own figure).
  constexpr sim::Bytes kInCorePeak = 2106408;
  constexpr sim::Bytes kShards = 547092;
  SECTION("lost-frees: rank 0's reductions' temporaries (gloo's clone of the input) never freed") {
    const FsdpImport f = import_fsdp_cpu("lost-frees");
    REQUIRE(f.import.job.ranks.size() == 2);
    for (std::size_t k = 0; k < 2; ++k) {
      CAPTURE(k);
      CHECK(f.incore_peaks[k] == kInCorePeak);
      // The temporaries are the collectives' workspace, freed with them: the gradients the
      // reductions make are the shards only.
      const sim::Workload& w = f.import.job.ranks[k];
      sim::Bytes gradients = 0;
      for (const sim::Tensor& t : w.tensors) {
        if (t.kind == sim::TensorKind::kGradient && t.producer != sim::kNoOp &&
            w.op(t.producer).collective)
          gradients += t.bytes;
      }
      CHECK(gradients == kShards);
    }
    // The CPU's Total Allocated keeps what it never saw freed: rank 0's 527,872-byte clone, from
    // its allocation to the process's end, so it peaks at 2,599,512 (rank 1: 2,071,652, as the
    // clean recording); nothing in the trace shows that the clone was freed.
    const auto rank0 =
        importers::measure_recorded_step(f.traces[0], f.import.reports[0].step, false);
    CHECK(rank0.peak_total_allocated_bytes == sim::Bytes{2599512});
    CHECK(rank0.unrecorded_frees == 0);
  }
  SECTION(
      "reused-address: the root's all-gather input freed unseen, its address handed out "
      "again") {
    const FsdpImport f = import_fsdp_cpu("reused-address");
    REQUIRE(f.import.job.ranks.size() == 2);
    CHECK(f.incore_peaks[0] == kInCorePeak);
    CHECK(f.incore_peaks[1] == kInCorePeak);
    // Total Allocated peaks at 2,110,092: 2,071,652 and the root's 38,440-byte input, whose free
    // it never saw; once the address is allocated again the 38,440 bytes are known to be free.
    const auto rank0 =
        importers::measure_recorded_step(f.traces[0], f.import.reports[0].step, false);
    CHECK(rank0.unrecorded_frees == 1);
    CHECK(rank0.peak_total_allocated_bytes == sim::Bytes{2071652});
  }
}
