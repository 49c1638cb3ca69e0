#pragma once
// The CPU side of a profiler step, read from CUDA's semantics rather than from any one network:
//  - which runtime calls block the calling thread (stream, device and event synchronize; the
//    synchronous cudaMemcpy family, and HIP's on ROCm, hipMemcpyWithStream included;
//    cudaMemcpyAsync with a pageable host buffer, which CUDA performs synchronously) and for how
//    long the thread waited for the device in each;
//  - the median cost of one launch (kernel, copy, memset), the price of an instruction a plan adds;
//  - the recorded copies (direction, bytes, pinned or pageable, stream) and the link bandwidths
//    they measure.
// The importer turns these into trace format v2's HostSide per op (step_host_side.cpp).
#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/link.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

enum class CopyDirection : std::uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kOther };

/// Direction and host-buffer kind from a copy's name ("Memcpy HtoD (Pageable -> Device)").
CopyDirection copy_direction(std::string_view name);
bool copy_is_pageable(std::string_view name);

/// A runtime call during which the host thread waited for the device.
struct BlockingCall {
  std::string_view name;
  sim::Nanoseconds start_ns = 0;
  /// Time spent waiting for earlier device work: the call's duration less the duration of a copy
  /// it performed itself (that copy is the host's own work, not a wait).
  sim::Nanoseconds wait_ns = 0;
};

/// Blocking runtime calls that start inside [start, end), on any thread, in time order.
std::vector<BlockingCall> blocking_calls(const KinetoTrace& trace, sim::Nanoseconds start,
                                         sim::Nanoseconds end);

/// Median duration of the launch calls (cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync,
/// cudaMemsetAsync...) inside [start, end); nullopt when there are none.
std::optional<sim::Nanoseconds> median_launch_ns(const KinetoTrace& trace, sim::Nanoseconds start,
                                                 sim::Nanoseconds end);

struct RecordedCopy {
  CopyDirection direction = CopyDirection::kOther;
  bool pageable = false;
  sim::Bytes bytes = 0;
  sim::Nanoseconds duration_ns = 0;
  std::int64_t stream = 0;
};

/// The copies that ran inside [start, end) (by their start on the device).
std::vector<RecordedCopy> recorded_copies(const KinetoTrace& trace, sim::Nanoseconds start,
                                          sim::Nanoseconds end);

/// Copies smaller than this are dominated by their fixed cost and do not measure a bandwidth.
inline constexpr sim::Bytes kMinMeasuringCopyBytes = sim::Bytes{1} << 20;

struct MeasuredLink {
  sim::PartialLink link;  // the bandwidths of the directions measured; never a latency
  std::size_t h2d_copies = 0;
  std::size_t d2h_copies = 0;
  bool h2d_pageable = false;  // measured on pageable copies (no pinned copy was large enough)
  bool d2h_pageable = false;
};

/// Per direction, total bytes over total time of the copies of at least kMinMeasuringCopyBytes:
/// the pinned ones when there are any (a plan's swaps use pinned buffers), else the pageable ones.
MeasuredLink measure_link(const std::vector<RecordedCopy>& copies);

/// The device streams that ran kernels, copies or memsets inside [start, end).
std::set<std::int64_t> streams_used(const KinetoTrace& trace, sim::Nanoseconds start,
                                    sim::Nanoseconds end);

}  // namespace memplan::importers
