// policy_bench: how long each policy takes to decide on one trace, and how many plans it
// simulates while deciding — where `memplan compare`'s time goes (issue 22: every policy
// near-linear in the number of feature maps). One policy at a time, on one thread (oneTBB limited
// to one worker), so the times are comparable; wall time and this process's CPU time. "plans":
// plans simulated (Evaluator::cost and timeline); "mem only": plans whose device memory alone was
// checked (Evaluator::fits: the allocations replayed, no engine).
//
//   policy_bench TRACE MEMORY [POLICY...]     e.g. policy_bench r1517.json 8GiB pooch dtr
#include <ctime>  // clock_gettime (POSIX, declared by time.h)

#include <chrono>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <oneapi/tbb/global_control.h>

#include "core/machine.hpp"
#include "core/units.hpp"
#include "io/trace_io.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"

using namespace memplan;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: policy_bench TRACE MEMORY [POLICY...]\n");
    return 2;
  }
  const sim::Workload workload = sim::read_trace(argv[1]);
  sim::MachineOverrides overrides;
  overrides.memory_bytes = sim::parse_bytes(argv[2], "MEMORY");
  const sim::Machine machine = sim::make_machine(workload.device, overrides);
  std::vector<std::string> names(argv + 3, argv + argc);
  if (names.empty()) {
    for (const search::Policy& p : search::policies()) names.emplace_back(p.name);
  }
  const tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  const search::NetworkView view(workload);
  fmt::print("{} feature maps, {} ops, device {}\n", view.feature_maps().size(),
             workload.ops.size(), sim::format_bytes(machine.memory_bytes));
  fmt::print("{:<16} {:>9} {:>9} {:>9} {:>9} {:>6}\n", "policy", "wall s", "cpu s", "plans",
             "mem only", "fits");
  double total = 0.0;
  for (const std::string& name : names) {
    const search::Policy* policy = search::find_policy(name);
    if (policy == nullptr) {
      fmt::print(stderr, "policy_bench: unknown policy '{}'\n", name);
      return 2;
    }
    search::Evaluator evaluator(workload, machine);
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const search::PolicyDecision d = policy->decide(evaluator, view);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_seconds() - c0;
    const bool fits = evaluator.cost(d.plan).feasible;
    total += wall;
    fmt::print("{:<16} {:>9.3f} {:>9.3f} {:>9} {:>9} {:>6}\n", name, wall, cpu,
               evaluator.count() - 1, evaluator.memory_checks(), fits ? "yes" : "no");
  }
  fmt::print("{:<16} {:>9.3f}\n", "total", total);
  return 0;
}
