#pragma once
// HostBackend: the runtime::Backend of the CPU. Its devices are HostDevices; its copy link is
// measured as HostDevice copies are made (a host-store vector filled from device memory) plus the
// stream-thread hand-offs around each copy.
#include "runtime/backend.hpp"

namespace memplan::host_backend {

class HostBackend final : public runtime::Backend {
 public:
  [[nodiscard]] std::string name() const override { return "host"; }
  [[nodiscard]] std::unique_ptr<runtime::Device> make_device(
      sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator) const override;
  /// Bandwidth fitted to timed copies of 4 KiB and 1 MiB (median of 21 each; the same both ways,
  /// since copy-in and copy-out are the same memcpy on the host); latency = the fit's intercept
  /// plus two stream-thread hand-offs (the copy stream woken by its wait, the compute stream woken
  /// by the copy's record), a cost the simulator has no other place for.
  [[nodiscard]] sim::Link measure_link() const override;
};

}  // namespace memplan::host_backend
