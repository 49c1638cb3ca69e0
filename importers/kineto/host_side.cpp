#include "importers/kineto/host_side.hpp"

#include <algorithm>
#include <unordered_map>

#include "importers/kineto/saturating_add.hpp"

namespace memplan::importers {
namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cuStreamSynchronize, ...
bool is_synchronize(std::string_view name) {
  return contains(name, "Synchronize");
}

// The runtime's or driver's memory calls: CUDA's, and HIP's on ROCm (hipMemcpyWithStream...).
bool is_memory_call(std::string_view name) {
  return starts_with(name, "cudaMem") || starts_with(name, "cuMem") || starts_with(name, "hipMem");
}

// cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH, hipMemcpyWithStream...: every copy call that is not an
// ...Async one.
bool is_copy_call(std::string_view name) {
  return is_memory_call(name) && contains(name, "cpy") && !contains(name, "Peer");
}

bool is_launch(std::string_view name) {
  return contains(name, "LaunchKernel") || contains(name, "LaunchCooperativeKernel") ||
         (is_memory_call(name) && contains(name, "Async") &&
          (contains(name, "cpy") || contains(name, "set")));
}

}  // namespace

CopyDirection copy_direction(std::string_view name) {
  if (contains(name, "HtoD")) return CopyDirection::kHostToDevice;
  if (contains(name, "DtoH")) return CopyDirection::kDeviceToHost;
  if (contains(name, "DtoD")) return CopyDirection::kDeviceToDevice;
  return CopyDirection::kOther;
}

bool copy_is_pageable(std::string_view name) {
  return contains(name, "Pageable");
}

std::vector<BlockingCall> blocking_calls(const KinetoTrace& trace, sim::Nanoseconds start,
                                         sim::Nanoseconds end) {
  std::unordered_map<std::int64_t, const GpuEvent*> copy_of;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.kind == GpuKind::kMemcpy && g.correlation) copy_of.emplace(*g.correlation, &g);
  }
  std::vector<BlockingCall> calls;
  for (const RuntimeEvent& r : trace.runtime_events) {
    if (r.start_ns < start || r.start_ns >= end) continue;
    const GpuEvent* copy = nullptr;
    if (r.correlation) {
      if (auto it = copy_of.find(*r.correlation); it != copy_of.end()) copy = it->second;
    }
    const bool async = contains(r.name, "Async");
    bool blocks = is_synchronize(r.name);
    if (is_copy_call(r.name)) {
      // CUDA runs a copy synchronously when it is not an Async call, and also when its host
      // buffer is pageable: device to pageable returns once the copy is done, pageable to device
      // first synchronizes the stream.
      blocks = !async || (copy != nullptr && copy_is_pageable(copy->name));
    }
    if (!blocks) continue;
    const sim::Nanoseconds own = copy != nullptr ? copy->duration_ns : 0;
    calls.push_back({r.name, r.start_ns, std::max<sim::Nanoseconds>(0, r.duration_ns - own)});
  }
  std::stable_sort(calls.begin(), calls.end(), [](const BlockingCall& a, const BlockingCall& b) {
    return a.start_ns < b.start_ns;
  });
  return calls;
}

std::optional<sim::Nanoseconds> median_launch_ns(const KinetoTrace& trace, sim::Nanoseconds start,
                                                 sim::Nanoseconds end) {
  std::vector<sim::Nanoseconds> durations;
  for (const RuntimeEvent& r : trace.runtime_events) {
    if (r.start_ns >= start && r.start_ns < end && is_launch(r.name))
      durations.push_back(r.duration_ns);
  }
  if (durations.empty()) return std::nullopt;
  auto middle = durations.begin() + static_cast<std::ptrdiff_t>(durations.size() / 2);
  std::nth_element(durations.begin(), middle, durations.end());
  return *middle;
}

std::vector<RecordedCopy> recorded_copies(const KinetoTrace& trace, sim::Nanoseconds start,
                                          sim::Nanoseconds end) {
  std::vector<RecordedCopy> copies;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.kind != GpuKind::kMemcpy || g.start_ns < start || g.start_ns >= end) continue;
    copies.push_back({copy_direction(g.name), copy_is_pageable(g.name), g.bytes.value_or(0),
                      g.duration_ns, g.stream});
  }
  return copies;
}

MeasuredLink measure_link(const std::vector<RecordedCopy>& copies) {
  MeasuredLink measured;
  auto measure = [&](CopyDirection direction, std::optional<sim::BytesPerSecond>& bandwidth,
                     std::size_t& used, bool& pageable) {
    for (bool want_pageable : {false, true}) {
      sim::Bytes bytes = 0;
      sim::Nanoseconds time = 0;
      std::size_t n = 0;
      for (const RecordedCopy& c : copies) {
        if (c.direction != direction || c.pageable != want_pageable ||
            c.bytes < kMinMeasuringCopyBytes || c.duration_ns <= 0)
          continue;
        bytes = saturating_add(bytes, c.bytes);
        time = saturating_add(time, c.duration_ns);
        ++n;
      }
      if (n == 0) continue;
      bandwidth = static_cast<double>(bytes) / (static_cast<double>(time) * 1e-9);
      used = n;
      pageable = want_pageable;
      return;
    }
  };
  measure(CopyDirection::kHostToDevice, measured.link.h2d_bytes_per_s, measured.h2d_copies,
          measured.h2d_pageable);
  measure(CopyDirection::kDeviceToHost, measured.link.d2h_bytes_per_s, measured.d2h_copies,
          measured.d2h_pageable);
  return measured;
}

std::set<std::int64_t> streams_used(const KinetoTrace& trace, sim::Nanoseconds start,
                                    sim::Nanoseconds end) {
  std::set<std::int64_t> streams;
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.start_ns >= start && g.start_ns < end) streams.insert(g.stream);
  }
  return streams;
}

}  // namespace memplan::importers
