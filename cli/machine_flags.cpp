#include "cli/machine_flags.hpp"

#include "cli/flag_checks.hpp"
#include "sim/input_error.hpp"

namespace memplan::cli {

void add_machine_flags(CLI::App& command, MachineFlags& flags) {
  command
      .add_option("--memory", flags.memory,
                  "device memory capacity, e.g. 16GiB (default: the trace's)")
      ->check(size_value());
  command.add_option(
      "--link", flags.link,
      "link: recorded (the trace's measured bandwidths) or a preset: pcie3, pcie4, pcie5, "
      "nvlink2, c2c");
  command.add_option("--h2d", flags.h2d, "host-to-device bandwidth, e.g. 12.5GB/s")
      ->check(bandwidth_value());
  command.add_option("--d2h", flags.d2h, "device-to-host bandwidth, e.g. 12.5GB/s")
      ->check(bandwidth_value());
  command.add_option("--latency", flags.latency, "cost of issuing one copy, e.g. 10us")
      ->check(duration_value());
  command
      .add_option("--host-memory", flags.host_memory,
                  "pinned host memory for swapped maps, e.g. 64GiB (default: unlimited)")
      ->check(size_value());
  command
      .add_option("--host-bandwidth", flags.host_bandwidth,
                  "the host CPU's streaming speed at host ops (an update on the host), e.g. "
                  "20GB/s (default: the trace's measurement, else 20GB/s)")
      ->check(bandwidth_value());
  command
      .add_option("--allocator", flags.allocator,
                  "how device memory is handed out: arena (one contiguous region, best fit: "
                  "cnmem, as vDNN used) or caching (PyTorch's caching allocator: segments, cached "
                  "free ones given back when memory runs out) (default: the trace's, else arena)")
      ->check(CLI::IsMember({"arena", "caching"}));
}

sim::Machine machine_from_flags(const sim::Workload& workload, const MachineFlags& flags) {
  sim::MachineOverrides overrides;
  if (!flags.memory.empty()) overrides.memory_bytes = sim::parse_bytes(flags.memory, "--memory");
  if (!flags.link.empty()) overrides.link_name = flags.link;
  if (!flags.h2d.empty()) overrides.link.h2d_bytes_per_s = sim::parse_bandwidth(flags.h2d, "--h2d");
  if (!flags.d2h.empty()) overrides.link.d2h_bytes_per_s = sim::parse_bandwidth(flags.d2h, "--d2h");
  if (!flags.latency.empty())
    overrides.link.latency_ns = sim::parse_duration(flags.latency, "--latency");
  if (!flags.host_memory.empty())
    overrides.host_memory_bytes = sim::parse_bytes(flags.host_memory, "--host-memory");
  if (!flags.host_bandwidth.empty()) {
    overrides.host_bandwidth_bytes_per_s =
        sim::parse_bandwidth(flags.host_bandwidth, "--host-bandwidth");
  }
  if (!flags.allocator.empty()) overrides.allocator = sim::parse_allocator_model(flags.allocator);
  return sim::make_machine(workload.device, overrides);
}

}  // namespace memplan::cli
