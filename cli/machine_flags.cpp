#include "cli/machine_flags.hpp"

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/flag_checks.hpp"
#include "core/input_error.hpp"
#include "core/interconnect.hpp"

namespace memplan::cli {

namespace {

// The fabrics a multi-GPU step's collectives are priced over (core/interconnect.hpp); the names
// are checked by the request, which lists the known ones.
void add_interconnect_flags(CLI::App& command, MachineFlags& flags) {
  command.add_option(
      "--interconnect", flags.interconnect,
      "the fabric between the GPUs of a node, which prices every collective of a multi-GPU step, "
      "one of: " +
          sim::fabric_preset_names(false) + ", recorded (the trace's times, as when not given)");
  command.add_option(
      "--network", flags.network,
      "the network between nodes, one NIC per GPU, one of: " + sim::fabric_preset_names(true) +
          " (needs --interconnect; default: the intra-node fabric joins every GPU)");
  command
      .add_option("--gpus-per-node", flags.gpus_per_node,
                  "GPUs in a node: global rank r sits on node r / N (needs --interconnect; "
                  "default 8)")
      ->check(integer_in(1, sim::kMaxGpusPerNode));
}

// A count integer_in let through while parsing (the request checks its range).
std::int64_t whole_number(const std::string& text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end) {
    throw sim::InputError("--gpus-per-node", "'" + text + "' is not a whole number");
  }
  return value;
}

}  // namespace

void add_machine_flags(CLI::App& command, MachineFlags& flags) {
  command
      .add_option("--memory", flags.memory,
                  "device memory capacity, e.g. 16GiB, or a share of the step's in-core peak, "
                  "e.g. 50% (default: the trace's)")
      ->check(budget_value());
  command.add_option(
      "--link", flags.link,
      "the host-device link, one of: recorded, pcie3, pcie4, pcie5, nvlink2, c2c (recorded: the "
      "trace's measured bandwidths)");
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
  command.add_option("--alloc-conf", flags.alloc_conf,
                     "the caching allocator's PYTORCH_CUDA_ALLOC_CONF, e.g. "
                     "expandable_segments:True or max_split_size_mb:128 (default: PyTorch's)");
  add_interconnect_flags(command, flags);
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
  request.alloc_conf = given(flags.alloc_conf);
  request.interconnect = given(flags.interconnect);
  request.network = given(flags.network);
  if (!flags.gpus_per_node.empty()) request.gpus_per_node = whole_number(flags.gpus_per_node);
  return request;
}

sim::Machine machine_from_flags(const sim::Workload& workload, const MachineFlags& flags) {
  return requests::make_machine(workload, machine_request(flags));
}

std::vector<sim::Machine> machines_from_flags(const sim::Job& job, const MachineFlags& flags) {
  return requests::make_machines(job, machine_request(flags));
}

}  // namespace memplan::cli
