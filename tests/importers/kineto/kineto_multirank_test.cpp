// The importer on hand-made traces of a data-parallel job (synthetic_ranks.hpp): ranks told
// apart in two files or one merged file, each collective's transfer split from its wait, device
// streams, the `after` edges each rule of Note [Stream waits] gives, the default step (Note
// [Default step]), and malformed collective arguments.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"
#include "tests/importers/kineto/synthetic_ranks.hpp"

using memplan::importers::import_kineto_job;
using memplan::importers::ImportOptions;
using memplan::importers::JobImportResult;
using memplan::importers::KinetoTrace;
using memplan::importers::parse_kineto_ranks;
using memplan::sim::CollectiveKind;
using memplan::sim::InputError;
using memplan::sim::Op;
using memplan::sim::Workload;
using memplan::test::merge_ranks;
using memplan::test::synthetic_rank;
using memplan::test::SyntheticRank;
using memplan::test::write_temp;
using nlohmann::json;

namespace {

SyntheticRank rank_options(int rank, std::int64_t allreduce_us) {
  SyntheticRank o;
  o.rank = rank;
  o.allreduce_us = allreduce_us;
  return o;
}

const Op& only_collective(const Workload& w) {
  const auto is = [](const Op& o) { return o.collective.has_value(); };
  REQUIRE(std::count_if(w.ops.begin(), w.ops.end(), is) == 1);
  return *std::find_if(w.ops.begin(), w.ops.end(), is);
}

const Op& named_op(const Workload& w, const std::string& name) {
  const auto it =
      std::find_if(w.ops.begin(), w.ops.end(), [&](const Op& o) { return o.name == name; });
  REQUIRE(it != w.ops.end());
  return *it;
}

std::string job_error(const std::vector<json>& docs) {
  try {
    std::vector<KinetoTrace> traces;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      for (auto& t : parse_kineto_ranks(docs[i].dump(), "r" + std::to_string(i) + ".json"))
        traces.push_back(std::move(t));
    }
    (void)import_kineto_job(traces);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Rank 0 recorded 500 us for the all-reduce, rank 1 200 us: rank 1 arrived last.
void check_two_rank_job(const JobImportResult& r) {
  REQUIRE(r.job.ranks.size() == 2);
  for (int k = 0; k < 2; ++k) {
    const Workload& w = r.job.ranks[static_cast<std::size_t>(k)];
    REQUIRE(w.distributed.has_value());
    CHECK(w.distributed->rank == k);
    CHECK(w.distributed->world_size == 2);
    CHECK(w.distributed->backend == "nccl");
    const Op& c = only_collective(w);
    CHECK(c.collective->kind == CollectiveKind::kAllReduce);
    CHECK(c.collective->in_bytes == 50 * 4);
    CHECK(c.collective->out_bytes == 50 * 4);
    CHECK(c.collective->dtype == "float32");
    CHECK(c.collective->group == "0");
    CHECK(c.collective->ranks == std::vector<std::int32_t>{0, 1});
    CHECK(c.collective->sequence == 0);
    CHECK(c.duration_ns == 200'000);  // the transfer: the least any rank recorded
    CHECK(r.reports[static_cast<std::size_t>(k)].transfer_from_peers);
  }
  CHECK(r.reports[0].collective_recorded_ns == 500'000);
  CHECK(r.reports[0].collective_recorded_ns - r.reports[0].collective_transfer_ns == 300'000);
  CHECK(r.reports[1].collective_recorded_ns - r.reports[1].collective_transfer_ns == 0);
}

}  // namespace

TEST_CASE("a job in two files: each rank's Workload, the transfer split from the wait",
          "[importers][kineto][multirank]") {
  const std::string f1 = write_temp("rank1.json", synthetic_rank(rank_options(1, 200)).dump());
  const std::string f0 = write_temp("rank0.json", synthetic_rank(rank_options(0, 500)).dump());
  // Given in any order, read in rank order.
  const JobImportResult r = import_kineto_job(std::vector<std::filesystem::path>{f1, f0});
  check_two_rank_job(r);
  CHECK(r.job.ranks[0].provenance.file == "rank0.json");
  // A folder of them is the same job.
  const auto folder = std::filesystem::path(f0).parent_path() / "job";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(f0, folder / "a.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(f1, folder / "b.json",
                             std::filesystem::copy_options::overwrite_existing);
  check_two_rank_job(import_kineto_job(std::vector<std::filesystem::path>{folder}));
}

TEST_CASE("a merged file: ranks told apart by the metadata's rank, else by their own steps",
          "[importers][kineto][multirank]") {
  const std::vector<json> ranks{synthetic_rank(rank_options(0, 500)),
                                synthetic_rank(rank_options(1, 200))};
  for (bool metadata : {true, false}) {
    CAPTURE(metadata);
    const auto traces = parse_kineto_ranks(merge_ranks(ranks, metadata).dump(), "merged.json");
    REQUIRE(traces.size() == 2);
    CHECK(traces[0].rank_rule ==
          (metadata ? "the metadata's rank" : "each process with its own ProfilerStep#N"));
    // Each rank's kernels, and its flows, are its own: the same correlation ids in both ranks.
    CHECK(traces[0].gpu_events.size() == traces[1].gpu_events.size());
    const JobImportResult r = import_kineto_job(traces);
    check_two_rank_job(r);
    CHECK(r.job.ranks[1].provenance.file == "merged.json (rank 1)");
  }
  // A merged file read as one trace says what it is.
  CHECK_THROWS_WITH(
      memplan::importers::parse_kineto_trace(merge_ranks(ranks, true).dump(), "m.json"),
      Catch::Contains("holds 2 ranks"));
}

TEST_CASE("a single rank of a larger job keeps its recorded collective times",
          "[importers][kineto][multirank]") {
  SyntheticRank o = rank_options(3, 500);
  o.world_size = 8;
  const auto traces = parse_kineto_ranks(synthetic_rank(o).dump(), "rank3.json");
  const JobImportResult r = import_kineto_job(traces);
  REQUIRE(r.job.ranks.size() == 1);
  CHECK(r.job.ranks[0].distributed->rank == 3);
  CHECK(r.job.ranks[0].distributed->world_size == 8);
  CHECK(only_collective(r.job.ranks[0]).duration_ns == 500'000);
  CHECK_FALSE(r.reports[0].transfer_from_peers);
  CHECK(r.reports[0].collective_transfer_ns == r.reports[0].collective_recorded_ns);
}

TEST_CASE("streams: compute first, the others by first use, side-stream work is an op of its own",
          "[importers][kineto][multirank]") {
  SyntheticRank o = rank_options(0, 500);
  o.side_kernel = true;
  const Workload w =
      import_kineto_job(parse_kineto_ranks(synthetic_rank(o).dump(), "s.json")).job.ranks.front();
  CHECK(w.streams ==
        std::vector<std::string>{"compute (stream 7)", "stream 13", "nccl (stream 20)"});
  const Op& side = named_op(w, "relu_1.stream13");
  CHECK(side.stream == 1);
  CHECK(side.duration_ns == 3'000);
  CHECK(side.inputs.empty());
  CHECK(named_op(w, "relu_1").duration_ns == 7'000);  // its own kernel, not a share of a union
  CHECK(only_collective(w).stream == 2);
  for (const Op& op : w.ops) {
    if (!op.collective && op.name.find(".stream") == std::string::npos) CHECK(op.stream == 0);
  }
}

TEST_CASE("after edges: recorded syncs, then cudaStreamWaitEvent calls, then DDP's semantics",
          "[importers][kineto][multirank]") {
  using Wait = SyntheticRank::Wait;
  const auto [wait, rule] = GENERATE(
      std::pair{Wait::kSyncEvent, "the recorded stream waits (cuda_sync)"},
      std::pair{Wait::kCall, "the recorded cudaStreamWaitEvent calls"},
      std::pair{Wait::kNone, "none recorded: the update waits for the backward's collectives"});
  SyntheticRank o = rank_options(0, 500);
  o.wait = wait;
  const auto r = import_kineto_job(parse_kineto_ranks(synthetic_rank(o).dump(), "w.json"));
  const Workload& w = r.job.ranks.front();
  CAPTURE(rule);
  CHECK(r.reports[0].wait_rule == rule);
  CHECK(r.reports[0].after_edges == 1);
  // DDP's optimizer waits for the all-reduce of the gradients, and nothing else waits.
  const Op& update = named_op(w, "sgd_step");
  CHECK(update.after == std::vector<memplan::sim::OpId>{only_collective(w).id});
  for (const Op& op : w.ops) {
    if (op.id != update.id) CHECK(op.after.empty());
  }
}

TEST_CASE("the default step is the median complete step, the same on every rank",
          "[importers][kineto][multirank]") {
  // Step 1 loads data 300 us longer (a warm-up), step 3 50 us: the median is step 3.
  SyntheticRank o = rank_options(0, 500);
  o.steps = 3;
  o.step_idle_us = {300, 0, 50};
  const json doc0 = synthetic_rank(o);
  o.rank = 1;
  o.step_idle_us = {300, 60, 0};  // alone, rank 1's median would be step 2
  const json doc1 = synthetic_rank(o);
  const auto single = memplan::test::import_json(doc0);
  CHECK(single.report.step.number == 3);
  CHECK_THAT(single.report.step_reason, Catch::StartsWith("the median of 3 complete steps ("));
  CHECK_THAT(single.report.step_reason, Catch::Contains("the first, ProfilerStep#1, is"));
  CHECK_THAT(single.report.step_reason, Catch::EndsWith("longer: a warm-up"));
  std::vector<KinetoTrace> traces = parse_kineto_ranks(doc0.dump(), "r0.json");
  for (auto& t : parse_kineto_ranks(doc1.dump(), "r1.json")) traces.push_back(std::move(t));
  const auto job = import_kineto_job(traces);
  // Each step as long as its slowest rank's: +300 (both), +60 (rank 1), +50 (rank 0): the
  // median is step 2, on both ranks.
  for (const auto& report : job.reports) {
    CHECK(report.step.number == 2);
    CHECK(report.step_was_chosen);
    CHECK_THAT(report.step_reason,
               Catch::StartsWith("the median of 3 steps complete on every rank ("));
  }
  ImportOptions third;
  third.step = 3;  // --step wins
  for (const auto& report : import_kineto_job(traces, third).reports) {
    CHECK(report.step.number == 3);
    CHECK_FALSE(report.step_was_chosen);
  }
}

TEST_CASE("a job's ranks must be told apart and run the same collectives",
          "[importers][kineto][multirank]") {
  SyntheticRank a = rank_options(0, 500);
  SyntheticRank b = rank_options(0, 200);
  CHECK_THAT(job_error({synthetic_rank(a), synthetic_rank(b)}), Catch::Contains("rank 0 again"));
  a.distributed_info = false;
  b.distributed_info = false;
  json doc_b = synthetic_rank(b);
  for (json& e : doc_b.at("traceEvents")) {
    if (e.value("name", "") == "record_param_comms") e["args"].erase("Rank");  // says no rank
  }
  CHECK_THAT(job_error({synthetic_rank(a), doc_b}),
             Catch::Contains("give each file's rank with --rank"));
  // --rank numbers files that do not say.
  const std::string fa = write_temp("norank_a.json", synthetic_rank(a).dump());
  const std::string fb = write_temp("norank_b.json", doc_b.dump());
  const auto numbered = memplan::importers::read_kineto_job({fb, fa}, {1, 0});
  REQUIRE(numbered.size() == 2);
  CHECK(numbered[0].source == fa);
  CHECK(numbered[1].distributed->rank == 1);
  CHECK(import_kineto_job(numbered).job.ranks.size() == 2);
  // A rank that skips a call its group made would hang the job.
  json no_call = synthetic_rank(rank_options(1, 200));
  auto& ev = no_call.at("traceEvents");
  ev.erase(std::remove_if(ev.begin(), ev.end(),
                          [](const json& e) {
                            const std::string n = e.value("name", "");
                            return n == "record_param_comms" || n.rfind("nccl:", 0) == 0;
                          }),
           ev.end());
  CHECK_THAT(job_error({synthetic_rank(rank_options(0, 500)), no_call}),
             Catch::Contains("rank 1 has no call #0 of process group '0'"));
}

TEST_CASE("malformed collective arguments are one InputError naming the field",
          "[importers][kineto][multirank][bad_input]") {
  const auto with = [](const std::string& key, const json& value) {
    json doc = synthetic_rank(rank_options(0, 500));
    for (json& e : doc.at("traceEvents")) {
      if (e.value("name", "") == "record_param_comms") e["args"][key] = value;
    }
    return job_error({doc});
  };
  CHECK_THAT(with("In msg nelems", -4),
             Catch::Contains("args.In msg nelems: implausible value -4"));
  CHECK_THAT(with("Collective name", "allscatter"),
             Catch::Contains("args.Collective name: unknown collective 'allscatter'"));
  CHECK_THAT(with("Process Group Ranks", "[0, one]"),
             Catch::Contains("args.Process Group Ranks: expected a list of ranks, found 'one'"));
  CHECK_THAT(with("Rank", "zero"), Catch::Contains("args.Rank: expected an integer"));
  json info = synthetic_rank(rank_options(0, 500));
  info["distributedInfo"]["rank"] = "0";
  CHECK_THAT(job_error({info}), Catch::Contains("$.distributedInfo.rank: expected an integer"));
  info["distributedInfo"]["rank"] = 9;
  CHECK_THAT(job_error({info}), Catch::Contains("rank 9 of a world of 2"));
  json title = synthetic_rank(rank_options(0, 500));
  for (json& e : title.at("traceEvents")) {
    if (e.value("name", "") == "nccl:all_reduce") e["name"] = "nccl:all_mangle";
  }
  CHECK_THAT(job_error({title}), Catch::Contains(".name: unknown collective 'all_mangle'"));
}

TEST_CASE("a long rank list, truncated as c10d writes it, is rebuilt from its ends or its stride",
          "[importers][kineto][multirank]") {
  // The step's own rank is in its group (validate() checks it): rank 1 for the odd ranks.
  const auto ranks_of = [](const json& list, const json& start, const json& stride,
                           std::int32_t rank = 0) {
    SyntheticRank o = rank_options(rank, 500);
    o.world_size = 8;
    json doc = synthetic_rank(o);
    for (json& e : doc.at("traceEvents")) {
      if (e.value("name", "") != "record_param_comms") continue;
      e["args"]["Group size"] = 4;
      e["args"]["Process Group Ranks"] = list;
      if (!start.is_null()) e["args"]["Global rank start"] = start;
      if (!stride.is_null()) e["args"]["Global rank stride"] = stride;
    }
    const auto r = import_kineto_job(parse_kineto_ranks(doc.dump(), "t.json"));
    return only_collective(r.job.ranks.front()).collective->ranks;
  };
  using Ranks = std::vector<std::int32_t>;
  CHECK(ranks_of("[0, 2, ..., 6]", nullptr, nullptr) == Ranks{0, 2, 4, 6});
  CHECK(ranks_of("[1, ..., 7]", 1, 2, 1) == Ranks{1, 3, 5, 7});
  CHECK(ranks_of(json::array({0, 1, 2, 3}), nullptr, nullptr) == Ranks{0, 1, 2, 3});
  CHECK(ranks_of("[0, 1, ..., 9]", nullptr, nullptr).empty());  // does not step evenly: unknown
}
