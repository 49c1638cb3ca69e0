#include "zoo/devices.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace memplan::zoo {
namespace {
constexpr sim::Bytes kGiB = sim::Bytes{1} << 30;
}  // namespace

// Peak FP32 (non-tensor-core) rates at boost clock and memory bandwidths from NVIDIA's datasheets:
// GeForce GTX Titan X (Maxwell) 6.6 TFLOP/s, 336.5 GB/s; Tesla K40c 4.29 TFLOP/s (base clock),
// 288 GB/s; Tesla P100 PCIe 16 GB 9.3 TFLOP/s, 732 GB/s; Tesla V100 SXM2 15.7 TFLOP/s, 900 GB/s;
// A100 SXM 19.5 TFLOP/s, 1555 GB/s (40 GB) / 2039 GB/s (80 GB); H100 SXM 67 TFLOP/s, 3.35 TB/s;
// GH200 (H100 with 96 GB HBM3) 67 TFLOP/s, 4.0 TB/s, attached to Grace by NVLink-C2C.
const std::vector<Device>& devices() {
  static const std::vector<Device> kDevices{
      {"titanx-maxwell", "GeForce GTX Titan X (Maxwell), 12 GiB, 6.6 TFLOP/s, 336 GB/s, pcie3",
       12 * kGiB, 6.6e12, 336.5e9, "pcie3"},
      {"k40c", "Tesla K40c, 12 GiB, 4.29 TFLOP/s, 288 GB/s, pcie3", 12 * kGiB, 4.29e12, 288e9,
       "pcie3"},
      {"p100-16gb", "Tesla P100 PCIe, 16 GiB, 9.3 TFLOP/s, 732 GB/s, pcie3", 16 * kGiB, 9.3e12,
       732e9, "pcie3"},
      {"v100-16gb", "Tesla V100 SXM2, 16 GiB, 15.7 TFLOP/s, 900 GB/s, pcie3", 16 * kGiB, 15.7e12,
       900e9, "pcie3"},
      {"v100-32gb", "Tesla V100 SXM2, 32 GiB, 15.7 TFLOP/s, 900 GB/s, pcie3", 32 * kGiB, 15.7e12,
       900e9, "pcie3"},
      {"v100-16gb-nvlink", "Tesla V100 SXM2 on POWER9, 16 GiB, 15.7 TFLOP/s, 900 GB/s, nvlink2",
       16 * kGiB, 15.7e12, 900e9, "nvlink2"},
      {"a100-40gb", "A100 SXM4, 40 GiB, 19.5 TFLOP/s, 1555 GB/s, pcie4", 40 * kGiB, 19.5e12, 1555e9,
       "pcie4"},
      {"a100-80gb", "A100 SXM4, 80 GiB, 19.5 TFLOP/s, 2039 GB/s, pcie4", 80 * kGiB, 19.5e12, 2039e9,
       "pcie4"},
      {"h100-80gb", "H100 SXM5, 80 GiB, 67 TFLOP/s, 3350 GB/s, pcie5", 80 * kGiB, 67e12, 3350e9,
       "pcie5"},
      {"gh200", "GH200 Grace Hopper, 96 GiB, 67 TFLOP/s, 4000 GB/s, c2c", 96 * kGiB, 67e12, 4000e9,
       "c2c"},
  };
  return kDevices;
}

const Device* find_device(std::string_view name) {
  for (const Device& d : devices()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const sim::LinkPreset& link_preset(const Device& device) {
  const auto& presets = sim::link_presets();
  const auto it = std::find_if(presets.begin(), presets.end(),
                               [&](const sim::LinkPreset& p) { return p.name == device.link; });
  MEMPLAN_CHECK(it != presets.end(), "every zoo device names one of the simulator's link presets");
  return *it;
}

sim::DeviceInfo device_info(const Device& device) {
  sim::DeviceInfo info;
  info.name = std::string(device.name);
  info.memory_bytes = device.memory_bytes;
  info.link = link_preset(device).link;
  info.memory_bandwidth_bytes_per_s = device.memory_bytes_per_s;
  info.peak_flops_per_s = device.peak_flops_per_s;
  return info;
}

}  // namespace memplan::zoo
