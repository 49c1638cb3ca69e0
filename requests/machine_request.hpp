#pragma once
// MachineRequest: the machine a user asks a step to be simulated on, as the what-if values the
// CLI's flags (--memory, --link, --h2d, --d2h, --latency, --host-memory, --host-bandwidth,
// --allocator, --interconnect, --network, --gpus-per-node) and the Python API's keywords give
// them. Parsed here and nowhere else, so that every entry accepts the same values and names a bad
// one by its flag.
//
// A quantity is text with its unit ("16GiB", "12.5GB/s", "10us", core/units.hpp) or, from
// Python, a plain number in the base unit (bytes, bytes per second, nanoseconds).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "core/workload.hpp"

namespace memplan::requests {

using Quantity = std::variant<std::string, double>;

struct MachineRequest {
  std::optional<Quantity> memory;             // bytes
  std::optional<std::string> link;            // a preset or "recorded"
  std::optional<Quantity> h2d;                // bytes per second
  std::optional<Quantity> d2h;                // bytes per second
  std::optional<Quantity> latency;            // nanoseconds
  std::optional<Quantity> host_memory;        // bytes
  std::optional<Quantity> host_bandwidth;     // bytes per second
  std::optional<std::string> allocator;       // arena or caching
  std::optional<std::string> interconnect;    // an intra-node fabric preset or "recorded"
  std::optional<std::string> network;         // a network preset between nodes
  std::optional<std::int64_t> gpus_per_node;  // 1 to sim::kMaxGpusPerNode
};

/// One quantity in its unit, for `flag`'s errors: bytes, bytes per second, nanoseconds. Throws
/// InputError naming the flag of a value that does not parse, is not finite or positive (a
/// duration may be zero), or (bytes, nanoseconds) is not whole.
sim::Bytes bytes_of(const Quantity& quantity, std::string_view flag);
sim::BytesPerSecond bandwidth_of(const Quantity& quantity, std::string_view flag);
sim::Nanoseconds duration_of(const Quantity& quantity, std::string_view flag);

/// The request as overrides of the trace's device. Throws InputError naming the flag of a value
/// that does not parse, is not finite or positive, or (bytes, nanoseconds) is not whole, and of a
/// gpus_per_node outside 1..kMaxGpusPerNode. Fabric names are sim::make_machine's to check.
sim::MachineOverrides overrides(const MachineRequest& request);

/// The workload's device with the request applied (sim::make_machine). Throws InputError, also
/// for an unknown fabric or network and a network or gpus_per_node without an interconnect.
sim::Machine make_machine(const sim::Workload& workload, const MachineRequest& request);

/// Each rank's machine, in the job's order: the rank's device with the same request applied (the
/// ranks of a job are asked about alike). Throws InputError as make_machine does.
std::vector<sim::Machine> make_machines(const sim::Job& job, const MachineRequest& request);

}  // namespace memplan::requests
