#pragma once
// Device presets: the GPUs the papers memplan reproduces ran on, and current ones, with the peak
// numbers the cost model needs and the host link each is usually attached by. A plan is made for
// a device the user may not own, so these are vendor datasheet figures (cited in devices.cpp).
#include <string_view>
#include <vector>

#include <string>

#include "core/machine.hpp"
#include "core/workload.hpp"
#include "zoo/precision.hpp"

namespace memplan::zoo {

/// The rates (flop/s) matmuls and convolutions run at in each precision (Note [Training
/// precision]): dense, without 2:4 structured sparsity; 0 where the device has no unit for it.
struct MatrixRates {
  double fp32 = 0;  // NVIDIA: the CUDA cores' FP32 rate; AMD: the matrix cores' FP32 rate
  double tf32 = 0;
  double bf16 = 0;
  double fp16 = 0;
};

struct Device {
  std::string_view name;
  std::string_view summary;
  sim::Bytes memory_bytes = 0;
  double peak_flops_per_s = 0;                 // FP32 vector (CUDA cores): every op but matmuls
  sim::BytesPerSecond memory_bytes_per_s = 0;  // device memory bandwidth
  /// The host link it is usually attached by: the name of a sim::LinkPreset (core/link.cpp),
  /// whose bandwidth and latency the device takes, so that `--device` and `--link` agree.
  std::string_view link;
  MatrixRates matrix;
};

const std::vector<Device>& devices();
/// nullptr when there is no such device.
const Device* find_device(std::string_view name);
/// The rate `device` runs matmuls and convolutions at in `precision`; 0 when it has no unit for it.
double matrix_flops_per_s(const Device& device, Precision precision);
/// The precisions `device` has a matrix rate for, "fp32, fp16" (for a message).
std::string precision_names(const Device& device);
/// The link preset `device.link` names (always one of sim::link_presets()).
const sim::LinkPreset& link_preset(const Device& device);
/// The device as a trace records it: capacity, rates, and its link preset's bandwidth (both
/// directions) and latency.
sim::DeviceInfo device_info(const Device& device);

}  // namespace memplan::zoo
