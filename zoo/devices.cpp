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
// Tensor-core rates, dense (the datasheets print the 2:4-sparse rate, twice these, for TF32 and
// below on A100 and later): V100 SXM2 125 TFLOP/s FP16 (no TF32, no BF16: Volta's tensor cores
// multiply FP16 only); A100 SXM TF32 156, BF16 and FP16 312; H100 SXM TF32 494.7, BF16 and FP16
// 989.4 (the H100 datasheet: 989 / 1,979 / 1,979 with sparsity); GH200 the same (its GPU is the
// H100's). Maxwell, Kepler and the P100 have no tensor cores: fp32 only.
// NVIDIA HGX B200 (the Blackwell architecture technical brief, HGX B200 at 1,000 W, per GPU):
// FP32 80 TFLOP/s, TF32 1.1 PFLOP/s, BF16 and FP16 2.25 PFLOP/s dense (2.2 / 4.5 / 4.5 sparse),
// 8 TB/s of HBM3e, 180 GB of it (the HGX B200 datasheet: 1.44 TB over eight GPUs), PCIe 5.0 x16 to
// the host.
// AMD Instinct MI300X (AMD's datasheet): 192 GB HBM3 at 5.3 TB/s; matrix cores FP32 163.4 TFLOP/s,
// TF32 653.7, BF16 and FP16 1307.4 dense (twice with sparsity); FP32 vector 81.7 TFLOP/s, the rate
// of one FP32 operation per lane (the datasheet's 163.4 for FP32 vector counts packed two-wide FP32
// instructions); PCIe 5.0 x16 to the host (its Infinity Fabric links join GPUs, not the host).
// Memory is given in GiB as the presets have it (80 GB H100: 80 GiB).
// A table, one entry per device: longer than a function should be, and clearer whole.
// NOLINTNEXTLINE(readability-function-size)
const std::vector<Device>& devices() {
  static const std::vector<Device> kDevices{
      {"titanx-maxwell",
       "GeForce GTX Titan X (Maxwell), 12 GiB, 6.6 TFLOP/s, 336 GB/s, pcie3",
       12 * kGiB,
       6.6e12,
       336.5e9,
       "pcie3",
       {6.6e12, 0, 0, 0}},
      {"k40c",
       "Tesla K40c, 12 GiB, 4.29 TFLOP/s, 288 GB/s, pcie3",
       12 * kGiB,
       4.29e12,
       288e9,
       "pcie3",
       {4.29e12, 0, 0, 0}},
      {"p100-16gb",
       "Tesla P100 PCIe, 16 GiB, 9.3 TFLOP/s, 732 GB/s, pcie3",
       16 * kGiB,
       9.3e12,
       732e9,
       "pcie3",
       {9.3e12, 0, 0, 0}},
      {"v100-16gb",
       "Tesla V100 SXM2, 16 GiB, 15.7 TFLOP/s (FP16 tensor 125), 900 GB/s, pcie3",
       16 * kGiB,
       15.7e12,
       900e9,
       "pcie3",
       {15.7e12, 0, 0, 125e12}},
      {"v100-32gb",
       "Tesla V100 SXM2, 32 GiB, 15.7 TFLOP/s (FP16 tensor 125), 900 GB/s, pcie3",
       32 * kGiB,
       15.7e12,
       900e9,
       "pcie3",
       {15.7e12, 0, 0, 125e12}},
      {"v100-16gb-nvlink",
       "Tesla V100 SXM2 on POWER9, 16 GiB, 15.7 TFLOP/s (FP16 tensor 125), 900 GB/s, nvlink2",
       16 * kGiB,
       15.7e12,
       900e9,
       "nvlink2",
       {15.7e12, 0, 0, 125e12}},
      {"a100-40gb",
       "A100 SXM4, 40 GiB, 19.5 TFLOP/s (tensor TF32 156, BF16/FP16 312), 1555 GB/s, pcie4",
       40 * kGiB,
       19.5e12,
       1555e9,
       "pcie4",
       {19.5e12, 156e12, 312e12, 312e12}},
      {"a100-80gb",
       "A100 SXM4, 80 GiB, 19.5 TFLOP/s (tensor TF32 156, BF16/FP16 312), 2039 GB/s, pcie4",
       80 * kGiB,
       19.5e12,
       2039e9,
       "pcie4",
       {19.5e12, 156e12, 312e12, 312e12}},
      {"h100-80gb",
       "H100 SXM5, 80 GiB, 67 TFLOP/s (tensor TF32 494.7, BF16/FP16 989.4), 3350 GB/s, pcie5",
       80 * kGiB,
       67e12,
       3350e9,
       "pcie5",
       {67e12, 494.7e12, 989.4e12, 989.4e12}},
      {"gh200",
       "GH200 Grace Hopper, 96 GiB, 67 TFLOP/s (tensor TF32 494.7, BF16/FP16 989.4), 4000 GB/s, "
       "c2c",
       96 * kGiB,
       67e12,
       4000e9,
       "c2c",
       {67e12, 494.7e12, 989.4e12, 989.4e12}},
      {"b200",
       "HGX B200, 180 GiB, 80 TFLOP/s (tensor TF32 1100, BF16/FP16 2250), 8000 GB/s, pcie5",
       180 * kGiB,
       80e12,
       8000e9,
       "pcie5",
       {80e12, 1.1e15, 2.25e15, 2.25e15}},
      {"mi300x",
       "AMD Instinct MI300X, 192 GiB, 81.7 TFLOP/s (matrix FP32 163.4, TF32 653.7, BF16/FP16 "
       "1307.4), 5300 GB/s, pcie5",
       192 * kGiB,
       81.7e12,
       5300e9,
       "pcie5",
       {163.4e12, 653.7e12, 1307.4e12, 1307.4e12}},
  };
  return kDevices;
}

double matrix_flops_per_s(const Device& device, Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return device.matrix.fp32;
    case Precision::kTf32:
      return device.matrix.tf32;
    case Precision::kBf16:
      return device.matrix.bf16;
    case Precision::kFp16:
      return device.matrix.fp16;
  }
  return 0;
}

std::string precision_names(const Device& device) {
  std::string names;
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (matrix_flops_per_s(device, p) <= 0) continue;
    if (!names.empty()) names += ", ";
    names += precision_name(p);
  }
  return names;
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
