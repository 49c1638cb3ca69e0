#pragma once
// Device presets: the GPUs the papers memplan reproduces ran on, and current ones, with the peak
// numbers the cost model needs and the host link each is usually attached by. A plan is made for
// a device the user may not own, so these are vendor datasheet figures (cited in devices.cpp).
#include <string_view>
#include <vector>

#include "sim/workload.hpp"

namespace memplan::zoo {

/// A host link preset (the Machine presets of ARCHITECTURE.md).
struct Link {
  std::string_view name;
  sim::BytesPerSecond bytes_per_s = 0;  // each direction
  sim::Nanoseconds latency_ns = 0;      // per copy
};

struct Device {
  std::string_view name;
  std::string_view summary;
  sim::Bytes memory_bytes = 0;
  double peak_flops_per_s = 0;                 // FP32, non-tensor-core
  sim::BytesPerSecond memory_bytes_per_s = 0;  // device memory bandwidth
  Link link;
};

const std::vector<Device>& devices();
/// nullptr when there is no such device.
const Device* find_device(std::string_view name);
/// The device as a trace records it.
sim::DeviceInfo device_info(const Device& device);

}  // namespace memplan::zoo
