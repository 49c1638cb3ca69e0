#pragma once
// Device presets: the GPUs the papers memplan reproduces ran on, and current ones, with the peak
// numbers the cost model needs and the host link each is usually attached by. A plan is made for
// a device the user may not own, so these are vendor datasheet figures (cited in devices.cpp).
#include <string_view>
#include <vector>

#include "core/machine.hpp"
#include "core/workload.hpp"

namespace memplan::zoo {

struct Device {
  std::string_view name;
  std::string_view summary;
  sim::Bytes memory_bytes = 0;
  double peak_flops_per_s = 0;                 // FP32, non-tensor-core
  sim::BytesPerSecond memory_bytes_per_s = 0;  // device memory bandwidth
  /// The host link it is usually attached by: the name of a sim::LinkPreset (core/link.cpp),
  /// whose bandwidth and latency the device takes, so that `--device` and `--link` agree.
  std::string_view link;
};

const std::vector<Device>& devices();
/// nullptr when there is no such device.
const Device* find_device(std::string_view name);
/// The link preset `device.link` names (always one of sim::link_presets()).
const sim::LinkPreset& link_preset(const Device& device);
/// The device as a trace records it: capacity, rates, and its link preset's bandwidth (both
/// directions) and latency.
sim::DeviceInfo device_info(const Device& device);

}  // namespace memplan::zoo
