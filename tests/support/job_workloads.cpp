#include "tests/support/job_workloads.hpp"

#include <vector>

#include "io/trace_io.hpp"
#include "tests/support/workload_builder.hpp"

namespace memplan::test {

using namespace memplan::sim;

Workload late_gather_rank(std::int32_t rank, Nanoseconds f1_ns, Nanoseconds f2_ns,
                          Nanoseconds g1_ns, bool g2_reads_b) {
  WorkloadBuilder b(kLateGatherMemory);
  const TensorId x = b.input("x", 1024);
  const TensorId a = b.forward("f1", {x}, 1024, f1_ns);
  const TensorId bb = b.forward("f2", {a}, 1024, f2_ns);
  const OpId ag = b.op("ag", "all_gather", Phase::kForward, {x}, {}, 200);
  const TensorId d = b.forward("f3", {bb}, 1024, 1500);
  const OpId f3 = b.last_op();
  const TensorId e = b.forward("f4", {d}, 1024, 600);
  const TensorId ge = b.backward("g4", {e}, 1024, 1000);
  const TensorId gd = b.backward("g3", {ge, d}, 1024, 1000);
  const TensorId g2 = b.backward(
      "g2", g2_reads_b ? std::vector<TensorId>{gd, bb} : std::vector<TensorId>{gd}, 1024, 1000);
  b.backward("g1", {g2, a, x}, 1024, g1_ns);
  Workload& w = b.workload();
  w.streams = {"compute", "nccl"};
  w.ops[index(f3)].workspace_bytes = 2048;
  w.ops[index(f3)].after = {ag};
  Op& gather = w.ops[index(ag)];
  gather.stream = 1;
  Collective call;
  call.kind = CollectiveKind::kAllGather;
  call.in_bytes = 1024;
  call.out_bytes = 2048;
  call.group = "0";
  gather.collective = call;
  w.distributed = Distributed{"nccl", rank, 2, std::nullopt, std::nullopt};
  return b.build();
}

std::string write_late_gather_job(const std::string& dir, bool one_rank) {
  Job job = late_gather_job();
  if (one_rank) job.ranks.erase(job.ranks.begin());
  const std::string path = dir + (one_rank ? "/late_gather_rank.json" : "/late_gather_job.json");
  write_job_file(job, path);
  return path;
}

Job late_gather_job() {
  Job job{{late_gather_rank(0, 1000, 2000, 1000), late_gather_rank(1, 300, 100, 3000)}};
  validate(job, "late_gather_job");
  return job;
}

}  // namespace memplan::test
