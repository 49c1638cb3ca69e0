#pragma once
// Backend: what validation and recording need from a place that runs Programs for real (the host
// CPU, a CUDA GPU): a name, fresh Devices of a given capacity whose data and weights derive from a
// seed, and the measured copy link between device and host memory. Everything above this (the
// interpreter, validate, calibrate, record) is written once against it.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/link.hpp"
#include "core/units.hpp"
#include "core/workload.hpp"
#include "runtime/device.hpp"

namespace memplan::runtime {

/// One algorithm of an op as the library that runs it measured it on the op's shapes.
struct AlgorithmTiming {
  sim::Bytes workspace_bytes = 0;
  sim::Nanoseconds duration_ns = 0;  // the library's own measurement; 0 when it only ranked them
};

/// An op whose library chooses among algorithms (cuDNN's convolutions): the fastest one and the
/// memory-optimal one (least workspace, then fastest).
struct FoundAlgorithms {
  AlgorithmTiming fastest;
  AlgorithmTiming memory_optimal;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "host", "cuda": what `--backend` names and what a recorded trace's provenance says.
  [[nodiscard]] virtual std::string name() const = 0;
  /// A device with `capacity_bytes` of memory (a hard cap) handed out under `allocator`; inputs
  /// and weights derive from `seed`.
  [[nodiscard]] virtual std::unique_ptr<Device> make_device(
      sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator) const = 0;
  /// Measured copy link of this backend, for record and --calibrate: bandwidth each way and the
  /// fixed cost of one copy (everything a copy costs beyond bytes / bandwidth, including stream
  /// hand-offs). It replaces the trace's link in a recorded trace and in a calibrated Machine.
  [[nodiscard]] virtual sim::Link measure_link() const = 0;
  /// Per op of `workload` whose library searches algorithms, what it found (record writes them
  /// into the trace). Ops not listed run one kernel whatever their workspace; a backend without
  /// such libraries (the host) lists none.
  [[nodiscard]] virtual std::map<sim::OpId, FoundAlgorithms> find_algorithms(
      const sim::Workload& /*workload*/) const {
    return {};
  }
};

}  // namespace memplan::runtime
