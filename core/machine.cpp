#include "core/machine.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/collective_cost.hpp"
#include "core/input_error.hpp"

namespace memplan::sim {

namespace {
// Saturating (core/units.hpp): a crawling link or a huge latency gives kMaxNanoseconds, never an
// overflow.
Nanoseconds copy_ns(Nanoseconds latency, Bytes bytes, BytesPerSecond bandwidth) {
  return add_ns(latency, transfer_ns(bytes, bandwidth));
}

// The link a trace's device gives, its unknown values from the default preset. A trace that gives
// a bandwidth but no latency is taken at its word: it has none.
Link trace_link(const PartialLink& recorded) {
  Link base = preset_link(kDefaultLink);
  if (recorded.has_bandwidth()) base.latency_ns = 0;
  return recorded.over(base);
}

// The link the single values go over: the preset `--link` names, or the trace's.
Link base_link(const DeviceInfo& device, const std::optional<std::string>& name) {
  if (!name) return trace_link(device.link);
  if (*name != kRecordedLink) return preset_link(*name);
  if (!device.link.has_bandwidth()) {
    // The bandwidths an importer measured from the trace's own copies (memplan import kineto).
    throw InputError("--link recorded",
                     "the trace has no measured link: import a profiler trace that recorded "
                     "copies of 1 MiB or more, or choose a preset");
  }
  return trace_link(device.link);
}

// The interconnect the flags name; none for `--interconnect recorded` or no flag.
std::optional<Interconnect> interconnect_of(const MachineOverrides& o) {
  const bool recorded = o.interconnect == kRecordedInterconnect;
  if (!o.interconnect || recorded) {
    const char* flag = o.network ? "--network" : o.gpus_per_node ? "--gpus-per-node" : nullptr;
    if (flag == nullptr) return std::nullopt;
    throw InputError(flag, recorded ? "prices collectives, and --interconnect recorded keeps their "
                                      "recorded times: name the intra-node fabric instead"
                                    : "name the intra-node fabric too (e.g. --interconnect "
                                      "nvlink4)");
  }
  return make_interconnect(*o.interconnect, o.network,
                           o.gpus_per_node.value_or(kDefaultGpusPerNode));
}
}  // namespace

Nanoseconds Machine::h2d_copy_ns(Bytes bytes) const {
  return copy_ns(link.latency_ns, bytes, link.h2d_bytes_per_s);
}
Nanoseconds Machine::d2h_copy_ns(Bytes bytes) const {
  return copy_ns(link.latency_ns, bytes, link.d2h_bytes_per_s);
}
Nanoseconds Machine::codec_ns(Bytes bytes) const {
  return copy_ns(0, bytes, memory_bandwidth_bytes_per_s);
}

Nanoseconds Machine::host_op_ns(Bytes bytes) const {
  return copy_ns(0, bytes, host_bandwidth_bytes_per_s);
}

Nanoseconds Machine::collective_ns(const Collective& c, Nanoseconds recorded_ns, std::int32_t rank,
                                   std::int32_t world_size) const {
  if (!interconnect) return recorded_ns;
  return collective_cost(c, rank, world_size, *interconnect).transfer_ns;
}

Machine make_machine(const DeviceInfo& device, const MachineOverrides& overrides) {
  Machine m;
  m.memory_bytes = device.memory_bytes;
  m.link = overrides.link.over(base_link(device, overrides.link_name));
  m.memory_bandwidth_bytes_per_s =
      device.memory_bandwidth_bytes_per_s.value_or(kDefaultMemoryBandwidth);
  if (overrides.memory_bytes) m.memory_bytes = *overrides.memory_bytes;
  if (overrides.host_memory_bytes) m.host_memory_bytes = *overrides.host_memory_bytes;
  m.allocator = overrides.allocator.value_or(device.allocator.value_or(AllocatorModel::kArena));
  if (overrides.allocator_config) {
    if (m.allocator != AllocatorModel::kCaching) {
      throw InputError("--alloc-conf",
                       "configures PyTorch's caching allocator, and the machine's is the arena "
                       "(add --allocator caching)");
    }
    m.allocator_config = *overrides.allocator_config;
  }
  m.host_bandwidth_bytes_per_s = overrides.host_bandwidth_bytes_per_s.value_or(
      device.host_bandwidth_bytes_per_s.value_or(kDefaultHostBandwidth));
  if (m.memory_bytes <= 0) {
    // Name what set it: the flag when given, the trace otherwise (a flag never given is no help).
    if (overrides.memory_bytes) throw InputError("--memory", "device memory must be positive");
    throw InputError("the trace's device",
                     fmt::format("device memory is {} bytes: give --memory (e.g. --memory 16GiB)",
                                 m.memory_bytes));
  }
  if (!(m.link.h2d_bytes_per_s > 0)) throw InputError("--h2d", "bandwidth must be positive");
  if (!(m.link.d2h_bytes_per_s > 0)) throw InputError("--d2h", "bandwidth must be positive");
  if (m.link.latency_ns < 0) throw InputError("--latency", "latency must not be negative");
  if (!(m.host_bandwidth_bytes_per_s > 0))
    throw InputError("--host-bandwidth", "bandwidth must be positive");
  m.interconnect = interconnect_of(overrides);
  return m;
}

}  // namespace memplan::sim
