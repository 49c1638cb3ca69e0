#pragma once
// Machine: what the simulator needs to know about the hardware a plan runs on — device memory
// capacity, the copy link between device and host memory (core/link.hpp: bandwidth each way and
// the fixed cost of issuing one copy), optionally the pinned host memory available for swapped
// maps, and the device memory bandwidth that prices encode/decode kernels. The Machine prices
// every instruction whose time is not in the trace: copies, codecs and host ops.
//
// A Machine starts from the DeviceInfo a trace carries and is then overridden by what-if flags
// (`--memory`, `--link`, `--h2d`, `--d2h`, `--latency`, `--host-memory`, `--host-bandwidth`,
// `--allocator`, `--interconnect`, `--network`, `--gpus-per-node`).
// Copies are never taken from a trace: the lowering creates them and the engine prices each at
// latency + bytes / bandwidth of its direction, so asking for another bandwidth rescales every copy
// of a recorded trace. Collectives of a multi-GPU step keep their recorded time unless the
// Machine has an interconnect (core/interconnect.hpp), which then prices every one of them
// (core/collective_cost.hpp).
#include <cstdint>
#include <optional>
#include <string>

#include "core/allocator_model.hpp"
#include "core/collective.hpp"
#include "core/interconnect.hpp"
#include "core/link.hpp"
#include "core/units.hpp"
#include "core/workload.hpp"

namespace memplan::sim {

/// Device memory bandwidth used to price encode/decode when the trace gives none (a V100-class
/// HBM2 device sustains about this much in streaming kernels).
inline constexpr BytesPerSecond kDefaultMemoryBandwidth = 500e9;
/// Host memory bandwidth a host op (an optimizer update on the CPU, Note [Host placement] in
/// core/plan.hpp) streams its operands at: a multi-threaded SGD/Adam step on a server CPU is bound
/// by its memory traffic, about 20 GB/s on a two-socket machine of the V100 era. Used when the
/// trace does not carry the recording machine's measurement (DeviceInfo) and no flag gives one.
inline constexpr BytesPerSecond kDefaultHostBandwidth = 20e9;

struct Machine {
  Bytes memory_bytes = 0;
  Link link = {16e9, 16e9, 0};
  std::optional<Bytes>
      host_memory_bytes;  // pinned host memory for swapped maps; unlimited when unset
  BytesPerSecond memory_bandwidth_bytes_per_s = kDefaultMemoryBandwidth;
  BytesPerSecond host_bandwidth_bytes_per_s = kDefaultHostBandwidth;
  /// How device memory is handed out (core/allocator_model.hpp): the trace's, `--allocator`, or
  /// the contiguous arena.
  AllocatorModel allocator = AllocatorModel::kArena;
  /// The caching allocator's PYTORCH_CUDA_ALLOC_CONF (`--alloc-conf`): PyTorch's default unless
  /// given; only with the caching model.
  AllocatorConfig allocator_config;
  std::optional<Interconnect> interconnect;  // nullopt: every collective takes its recorded time

  /// latency + ceil(bytes / bandwidth), in nanoseconds.
  [[nodiscard]] Nanoseconds h2d_copy_ns(Bytes bytes) const;
  [[nodiscard]] Nanoseconds d2h_copy_ns(Bytes bytes) const;
  /// ceil(bytes / memory bandwidth): an encode or decode of a map of `bytes` (full size), which
  /// streams the map through device memory once.
  [[nodiscard]] Nanoseconds codec_ns(Bytes bytes) const;
  /// ceil(bytes / host bandwidth): a host op that reads and writes `bytes` of host memory.
  [[nodiscard]] Nanoseconds host_op_ns(Bytes bytes) const;
  /// The transfer time of collective `c` called by global rank `rank` of `world_size`, once its
  /// group has arrived: `recorded_ns` without an interconnect, else the cost model's
  /// (Note [Collective cost model] in core/collective_cost.hpp).
  [[nodiscard]] Nanoseconds collective_ns(const Collective& c, Nanoseconds recorded_ns,
                                          std::int32_t rank, std::int32_t world_size) const;
};

/// What-if values given on the command line; unset ones keep the trace's value.
struct MachineOverrides {
  std::optional<Bytes> memory_bytes;
  /// `--link`: a preset, which replaces the trace's whole link, or kRecordedLink, which keeps the
  /// trace's link and requires it to have a bandwidth.
  std::optional<std::string> link_name;
  PartialLink link;  // `--h2d`, `--d2h`, `--latency`: over the preset's or the trace's
  std::optional<Bytes> host_memory_bytes;
  std::optional<BytesPerSecond> host_bandwidth_bytes_per_s;  // `--host-bandwidth`
  std::optional<AllocatorModel> allocator;                   // `--allocator`
  std::optional<AllocatorConfig> allocator_config;           // `--alloc-conf`
  /// `--interconnect`: an intra-node fabric preset, or kRecordedInterconnect (keep every
  /// collective's recorded time, as when it is not given); `--network`: a network preset between
  /// nodes; `--gpus-per-node` (default 8). The last two need the first.
  std::optional<std::string> interconnect;
  std::optional<std::string> network;
  std::optional<std::int32_t> gpus_per_node;
};

/// Trace values first, then the preset `link_name`, then the single values of `link` (so `--link
/// pcie4 --latency 2us` takes the bandwidth of pcie4 and a 2 us latency). Missing bandwidths come
/// from kDefaultLink; a trace that gives a bandwidth but no latency has none. The interconnect is
/// make_interconnect's of `--interconnect`, `--network` and `--gpus-per-node`. Throws InputError
/// (naming the flag) for an unknown link or fabric, `recorded` on a trace without a bandwidth, a
/// non-positive value, or `--network` / `--gpus-per-node` without an intra-node fabric.
Machine make_machine(const DeviceInfo& device, const MachineOverrides& overrides = {});

}  // namespace memplan::sim
