#pragma once
// A small job of two ranks for tests of plans on a job (search/studies/job_comparison.hpp,
// job_search.hpp, and the commands that take a job): the same step on both ranks, with different
// durations, so that one plan applies to both and each rank is late somewhere.
#include <cstdint>
#include <string>

#include "core/job.hpp"

namespace memplan::test {

/// The device memory of late_gather_job's ranks, 5 KiB: in core f3 needs 6 KiB (x, a, b, d and
/// its workspace), so a must leave before f3 (d is f3's own output, and b its input). Every tensor
/// is 1 KiB and the workspace 2 KiB, so that the arena has no hole a block does not fit.
inline constexpr sim::Bytes kLateGatherMemory = 5120;
/// The copy link late_gather_job's numbers are worked out with: 1.024 GB/s both ways, so that a
/// copy of a tensor (1 KiB) takes 1000 ns.
inline constexpr double kLateGatherLink = 1.024e9;

/// One rank of late_gather_job, every tensor 1 KiB: x (input); f1 (`f1_ns`) writes a; f2
/// (`f2_ns`) reads a, writes b; ag, an all-gather on the nccl stream (recorded transfer 200 ns),
/// reads x and writes nothing (its output is not a buffer of the step); f3 (1500, workspace 2 KiB)
/// reads b, writes d and waits for ag (`after`), as a layer waits for its gathered weights; f4
/// (600) reads d, writes e; backward g4 (1000, reads e), g3 (1000, reads d), g2 (1000), g1
/// (`g1_ns`, reads a and x), each writing 1 KiB. Device memory kLateGatherMemory. With
/// `g2_reads_b`, g2 reads b too (b becomes a feature map): a rank whose step differs in structure,
/// to which another rank's plan does not apply.
sim::Workload late_gather_rank(std::int32_t rank, sim::Nanoseconds f1_ns, sim::Nanoseconds f2_ns,
                               sim::Nanoseconds g1_ns, bool g2_reads_b = false);

/// Rank 0 (f1 1000, f2 2000, g1 1000) reaches the all-gather late, at 3000; rank 1 (f1 300, f2
/// 100, g1 3000) reaches it at 400 and waits, and then sets the step with its long g1.
sim::Job late_gather_job();

/// late_gather_job written as a trace (format v3) to `dir`/late_gather_job.json; its path. With
/// `one_rank`, rank 1 alone (a rank whose peers are assumed alike) to `dir`/late_gather_rank.json.
std::string write_late_gather_job(const std::string& dir, bool one_rank = false);

}  // namespace memplan::test
