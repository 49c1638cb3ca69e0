#pragma once
// Recording: turns a workload whose structure is known (a zoo model, durations still zero or
// modeled) into a recorded trace of a backend. The in-core plan runs on one device of the backend
// for `warmup` iterations and then one recorded iteration; each op's duration is its measured
// kernel time in that iteration, and the device's link is the backend's measured copy link. The
// result is trace format v1 with provenance "recorded" and the backend's name.
#include <cstdint>

#include "core/workload.hpp"
#include "runtime/backend.hpp"

namespace memplan::runtime {

struct RecordOptions {
  std::uint64_t seed = 1;  // data and weights
  int warmup = 2;          // iterations run before the recorded one(s)
  /// Recorded iterations: each op's duration is the median of its kernel times over them (one by
  /// default; more make the trace robust to a preemption during one iteration).
  int iterations = 1;
};

struct Recording {
  sim::Workload workload;              // the recorded trace
  sim::Nanoseconds iteration_ns = 0;   // of the recorded iteration
  sim::Bytes peak_reserved_bytes = 0;  // of the in-core run (the recorded device's capacity)
  sim::Link link;                      // the backend's measured copy link
};

/// Records `workload` on `backend`. Every op gets its measured duration (at least 1 ns); the
/// device is named after the backend, with the in-core peak as its memory and the measured link.
/// Ops for which the backend found algorithms (Backend::find_algorithms, cuDNN's convolutions)
/// are recorded with the fastest one as their default (its workspace; the duration measured in
/// the run, which uses it) and, when it needs less workspace, the memory-optimal one as their
/// only alternative "memory_optimal": its workspace, and the measured duration plus the
/// difference the library measured between the two (at least 1 ns). Other ops keep their
/// alternatives, each with the op's measured duration (such a backend runs one kernel per layer,
/// whatever the algorithm). Throws std::runtime_error naming the op when the backend cannot run
/// a layer.
Recording record(const Backend& backend, const sim::Workload& workload,
                 const RecordOptions& options = {});

}  // namespace memplan::runtime
