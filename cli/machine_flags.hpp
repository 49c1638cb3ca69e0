#pragma once
// The what-if flags every command that simulates shares (--memory, --link, --h2d, --d2h,
// --latency, --host-memory, --host-bandwidth, --allocator, --alloc-conf, --interconnect, --network,
// --gpus-per-node), as text; requests/machine_request.hpp parses them, for the CLI and the Python
// API alike.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "core/workload.hpp"
#include "requests/machine_request.hpp"

namespace memplan::cli {

struct MachineFlags {
  std::string memory;
  std::string link;
  std::string h2d;
  std::string d2h;
  std::string latency;
  std::string host_memory;
  std::string host_bandwidth;
  std::string allocator;
  std::string alloc_conf;
  std::string interconnect;
  std::string network;
  std::string gpus_per_node;
};

void add_machine_flags(CLI::App& command, MachineFlags& flags);

/// The flags given, as a request.
requests::MachineRequest machine_request(const MachineFlags& flags);
/// The trace's device with the flags applied. Throws InputError naming the bad flag.
sim::Machine machine_from_flags(const sim::Workload& workload, const MachineFlags& flags);
/// Each rank's machine, the flags applied to every rank alike.
std::vector<sim::Machine> machines_from_flags(const sim::Job& job, const MachineFlags& flags);

}  // namespace memplan::cli
