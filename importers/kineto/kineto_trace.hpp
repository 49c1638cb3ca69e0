#pragma once
// KinetoTrace: the events of a PyTorch profiler (Kineto) Chrome-trace file, normalised so that
// the importer does not care which of the two formats it came from:
//  - 2021: categories `Operator`, `Runtime`, `Kernel`, `Memcpy`, `Memset`; args "External id"
//    on ops, "external id" and "correlation" on runtime calls and GPU activities;
//  - current: `cpu_op`, `user_annotation`, `cuda_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`,
//    `ac2g` flow events (`async_cpu_to_gpu` in some Kineto versions) linking a launch to its GPU
//    activity; `[memory]` events carry `Addr`,
//    `Total Allocated` and `Total Reserved`.
// A bare JSON array whose events carry no category is the legacy format of a PyTorch built
// without Kineto (torch.autograd.profiler): it has no device activity, shapes or memory, and
// parsing refuses it with what to do instead.
// Times are converted from microseconds (possibly fractional) to integer nanoseconds. Events
// memplan does not use (python functions, flows other than ac2g, metadata) are skipped; events it
// uses must carry the fields it needs, of the right type, or parsing throws InputError naming the
// event's JSON path.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"

namespace memplan::importers {

/// A CPU-side operator or annotation (a complete "X" event on a host thread).
struct CpuEvent {
  std::string name;
  std::string thread;  // "pid/tid"
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> external_id;
  std::optional<std::int64_t> sequence_number;
  /// Recorded input shapes ("Input Dims"/"Input dims"); empty when not recorded. A 0-dim tensor
  /// and a non-tensor argument both appear as an empty shape.
  std::vector<std::vector<std::int64_t>> input_dims;
  /// Shapes of the tensor-list arguments (a foreach or fused optimizer op's parameters, grads,
  /// states), one list per such argument in argument order.
  std::vector<std::vector<std::vector<std::int64_t>>> input_lists;
  /// Recorded input types ("Input type"), parallel to input_dims when present.
  std::vector<std::string> input_types;

  [[nodiscard]] sim::Nanoseconds end_ns() const { return start_ns + duration_ns; }
};

/// A CUDA runtime call (cudaLaunchKernel, cudaMemcpyAsync...) on a host thread.
struct RuntimeEvent {
  std::string name;
  std::string thread;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> correlation;
  std::optional<std::int64_t> external_id;
};

enum class GpuKind : std::uint8_t { kKernel, kMemcpy, kMemset };

/// Work that ran on the device: a kernel, a copy or a memset.
struct GpuEvent {
  GpuKind kind = GpuKind::kKernel;
  std::string name;
  sim::Nanoseconds start_ns = 0;
  sim::Nanoseconds duration_ns = 0;
  std::optional<std::int64_t> correlation;
  std::optional<std::int64_t> external_id;
  std::int64_t stream = 0;
  /// Bytes copied or set ("bytes"), when recorded.
  std::optional<sim::Bytes> bytes;
};

/// One allocation (bytes > 0) or free (bytes < 0) of the caching allocator.
struct MemoryEvent {
  std::string thread;
  sim::Nanoseconds time_ns = 0;
  sim::Bytes bytes = 0;
  std::int64_t device_type = 0;  // 0 CPU, 1 CUDA
  std::optional<sim::Bytes> total_allocated;
  std::optional<std::int64_t> addr;  // "Addr" (current format): pairs an allocation with its free
};

enum class KinetoFormat : std::uint8_t { k2021, kCurrent, kUnknown };

struct KinetoTrace {
  std::string source;  // the file name, for errors and provenance
  KinetoFormat format = KinetoFormat::kUnknown;
  std::string device_name;           // from deviceProperties, empty when absent
  sim::Bytes device_memory = 0;      // totalGlobalMem, 0 when absent
  std::vector<CpuEvent> cpu_events;  // sorted by (start, longer first)
  std::vector<RuntimeEvent> runtime_events;
  std::vector<GpuEvent> gpu_events;        // sorted by start
  std::vector<MemoryEvent> memory_events;  // sorted by time, stable
};

/// Parses the text of a trace (already decompressed). Throws InputError naming `source`.
KinetoTrace parse_kineto_trace(std::string_view text, std::string_view source);

/// Reads a .json or .json.gz file and parses it.
KinetoTrace read_kineto_trace(const std::string& path);

}  // namespace memplan::importers
