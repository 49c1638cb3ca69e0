#pragma once
// MachineRequest: the machine a user asks a step to be simulated on, as the what-if values the
// CLI's flags (--memory, --link, --h2d, --d2h, --latency, --host-memory, --host-bandwidth,
// --allocator, --alloc-conf, --interconnect, --network, --gpus-per-node) and the Python API's
// keywords give them. Parsed here and nowhere else, so that every entry accepts the same values and
// names a bad one by its flag.
//
// A quantity is text with its unit ("16GiB", "12.5GB/s", "10us", core/units.hpp) or, from
// Python, a plain number in the base unit (bytes, bytes per second, nanoseconds). The device
// memory may also be a share of the step's in-core peak ("50%": sim::incore_peak, what `memplan
// info` calls the in-core peak), which needs the workload: make_machine and make_machines take
// it, `overrides` refuses it.
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
  std::optional<std::string> alloc_conf;      // PYTORCH_CUDA_ALLOC_CONF's syntax
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

/// Whether a memory quantity is a share of the in-core peak ("50%").
bool is_share(const Quantity& quantity);

/// The percent of a share ("50%" -> 50). Throws InputError naming `flag` when it is not a
/// positive finite number followed by '%'.
double share_percent(std::string_view text, std::string_view flag);

/// A device memory budget for `workload`: bytes_of, or a share of its in-core peak rounded down
/// to whole bytes. Throws InputError naming `flag` of a share that is not a positive finite number
/// of percent, or that comes to no byte or over the limit of 1 EiB.
sim::Bytes budget_of(const Quantity& quantity, const sim::Workload& workload,
                     std::string_view flag);

/// The request as overrides of the trace's device. Throws InputError naming the flag of a value
/// that does not parse, is not finite or positive, or (bytes, nanoseconds) is not whole, and of a
/// gpus_per_node outside 1..kMaxGpusPerNode, and of a memory share (make_machine takes those).
/// Fabric names are sim::make_machine's to check.
sim::MachineOverrides overrides(const MachineRequest& request);

/// The workload's device with the request applied (sim::make_machine), a memory share of its
/// in-core peak resolved (budget_of). Throws InputError, also for an unknown fabric or network
/// and a network or gpus_per_node without an interconnect.
sim::Machine make_machine(const sim::Workload& workload, const MachineRequest& request);

/// Each rank's machine, in the job's order: the rank's device with the same request applied (the
/// ranks of a job are asked about alike; a memory share is of each rank's own in-core peak).
/// Throws InputError as make_machine does.
std::vector<sim::Machine> make_machines(const sim::Job& job, const MachineRequest& request);

}  // namespace memplan::requests
