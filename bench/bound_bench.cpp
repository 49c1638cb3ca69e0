// bound_bench: the lower bound on a plan's time (search/bound/lower_bound.hpp) of a trace at a
// device memory, with the linear program's size and how long it took (bench/optimality-gap.sh
// prints the search's time beside it). Usage: bound_bench TRACE MEMORY_BYTES [--maps-only]
// [MAX_POINTS [MAX_COLUMNS]]
#include <cstdlib>
#include <string>

#include <fmt/core.h>

#include "core/machine.hpp"
#include "io/trace_io.hpp"
#include "search/bound/lower_bound.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: bound_bench TRACE MEMORY_BYTES [--maps-only]\n");
    return 2;
  }
  const memplan::sim::Workload workload = memplan::sim::read_trace(argv[1]);
  memplan::sim::MachineOverrides overrides;
  overrides.memory_bytes = std::atoll(argv[2]);
  const memplan::sim::Machine machine = memplan::sim::make_machine(workload.device, overrides);
  memplan::search::BoundOptions options;
  options.host_placement = !(argc > 3 && std::string(argv[3]) == "--maps-only");
  if (argc > 4) options.max_points = static_cast<std::size_t>(std::atoll(argv[4]));
  if (argc > 5) options.max_columns = static_cast<std::size_t>(std::atoll(argv[5]));
  const memplan::search::LowerBound b = memplan::search::lower_bound(workload, machine, options);
  fmt::print(
      "fits {} bound {:.6f} ms ideal {:.6f} ms (+{:.2f}%) host_update {} points {} "
      "columns {} rows {} optimal {} in {:.2f} s\n",
      b.fits, memplan::sim::to_seconds(b.bound_ns) * 1e3,
      memplan::sim::to_seconds(b.ideal_ns) * 1e3,
      (static_cast<double>(b.bound_ns) / static_cast<double>(b.ideal_ns) - 1) * 100, b.host_update,
      b.points, b.columns, b.rows, b.optimal, b.elapsed_s);
  return 0;
}
