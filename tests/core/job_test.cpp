// A Job's world and ranks, and the rules of validate() that only a program, not a trace file, can
// break (a file's reader refuses these values first: tests/io/job_io_test.cpp).
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/job.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;

namespace {

std::string job_error(const Job& job) {
  try {
    validate(job, "job");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

Workload mlp4() {
  return read_trace(memplan::test::source_path("traces/mlp4.json"));
}

}  // namespace

TEST_CASE("a job's world size and ranks", "[core][job][v3]") {
  Job single{{mlp4()}};
  CHECK(single.world_size() == 1);
  CHECK(single.rank_of(0) == 0);
  CHECK(job_error(single) == "accepted");
  Job pair{{mlp4(), mlp4()}};
  pair.ranks[0].distributed =
      Distributed{.backend = "nccl", .rank = 4, .world_size = 8, .step_start_ns = {}, .fsdp = {}};
  pair.ranks[1].distributed =
      Distributed{.backend = "nccl", .rank = 6, .world_size = 8, .step_start_ns = {}, .fsdp = {}};
  CHECK(pair.world_size() == 8);
  CHECK(pair.rank_of(0) == 4);
  CHECK(pair.rank_of(1) == 6);
  CHECK(job_error(pair) == "accepted");
}

TEST_CASE("validate(Job) refuses what no file can hold", "[core][job][v3]") {
  CHECK(job_error(Job{}) == "job: a job of no ranks");
  Job anonymous{{mlp4(), mlp4()}};  // two ranks that do not say which
  CHECK(job_error(anonymous) ==
        "job: $.ranks[0]: missing field 'distributed': each rank of a job of several names its "
        "rank and world size");
  Job one{{mlp4()}};
  one.ranks[0].distributed =
      Distributed{.backend = "", .rank = 1, .world_size = 2, .step_start_ns = {}, .fsdp = {}};
  one.ranks[0].ops[3].after = {kNoOp};
  CHECK(job_error(one) == "job: rank 1: $.ops[3].after[0]: unknown op id -1");
  one.ranks[0].ops[3].after.clear();
  Collective send;
  send.kind = CollectiveKind::kSend;
  send.peer = -5;
  one.ranks[0].ops[3].collective = send;
  CHECK(job_error(one).find("job: rank 1: $.ops[3].collective.peer: a send names its peer") == 0);
}
