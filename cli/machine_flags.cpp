#include "cli/machine_flags.hpp"

#include <optional>

#include "cli/flag_checks.hpp"

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

requests::MachineRequest machine_request(const MachineFlags& flags) {
  requests::MachineRequest request;
  const auto given = [](const std::string& text) {
    return text.empty() ? std::nullopt : std::optional<std::string>(text);
  };
  request.memory = given(flags.memory);
  request.link = given(flags.link);
  request.h2d = given(flags.h2d);
  request.d2h = given(flags.d2h);
  request.latency = given(flags.latency);
  request.host_memory = given(flags.host_memory);
  request.host_bandwidth = given(flags.host_bandwidth);
  request.allocator = given(flags.allocator);
  return request;
}

sim::Machine machine_from_flags(const sim::Workload& workload, const MachineFlags& flags) {
  return requests::make_machine(workload, machine_request(flags));
}

}  // namespace memplan::cli
