#pragma once
// The units of a step: the events the importer turns into ops or folds into them (Note [Kineto
// dataflow] in dataflow.cpp says which), its collectives (Note [Collectives of a step] in
// collective_units.cpp), and what each cost — the device time of the kernels and memsets it
// launched, on each device stream, and the scratch memory it allocated and freed again.
//
// Note [Device time]
// ~~~~~~~~~~~~~~~~~~
// Each kernel or memset is linked to its launch (correlation id, the ac2g flow, else external id)
// and counted for the unit whose time window on the launching thread holds the launch: a
// collective's op first, then the innermost layer unit; one launched inside the step but outside
// every unit (a hook, an annotation without an aten op) counts for the layer unit that started
// last before it. Each activity counts with its own recorded duration, on its own stream: the
// step runs on several device streams (Note [Device streams] in core/workload.hpp), so a unit's
// time on the compute stream is its op's duration, and what it ran on another stream is an op of
// its own on that stream (StepBuilder), as is a collective. The ops' durations add up to the
// kernels' recorded time, which exceeds the device's busy time by what ran side by side. Copies
// are link traffic, not compute.
//
// Streams: the compute stream (index 0) is the one that ran most of the kernels that are not a
// collective's; the others follow in the order of their first activity in the step, labelled by
// what they ran: "compute (stream 7)", "nccl (stream 20)" (rccl on ROCm), "stream 13". A
// collective without a kernel (gloo's run on the host) goes on a stream "gloo (host)".
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ids.hpp"
#include "core/layer.hpp"
#include "core/units.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"

namespace memplan::importers::detail {

struct Unit {
  enum class Role : std::uint8_t { kForward, kBackward, kUpdate, kGlue, kCollective };
  /// A forward event that is no op: the tensor it reads under another shape (a view) or in
  /// another place or layout (a device copy, contiguous).
  enum class Alias : std::uint8_t { kNone, kView, kCopy };

  std::size_t event = 0;  // in trace.cpu_events
  Role role = Role::kGlue;
  sim::LayerType layer;      // a forward op's layer; a generic one keeps its aten name
  bool convolution = false;  // a forward op built by the convolution rule (conv1d: Note [conv1d])
  Alias alias = Alias::kNone;
  /// Time on the compute stream (a collective's: on its own stream).
  sim::Nanoseconds device_ns = 0;
  /// Time on each other stream, by stream index (not for a collective).
  std::map<std::int32_t, sim::Nanoseconds> side_ns;
  /// The first launch of its work on each stream.
  std::map<std::int32_t, sim::Nanoseconds> first_launch_on;
  /// A collective's stream, and its kernel's copy of the collective's arguments (newer Kineto).
  std::int32_t stream = 0;
  std::shared_ptr<const CommArgs> kernel_comm;
  sim::Bytes workspace = 0;
  std::optional<std::int64_t> sequence;          // a backward node's sequence number
  std::set<std::int64_t> sequences;              // a forward op's: every number in its subtree
  std::optional<sim::Nanoseconds> first_launch;  // the first launch of its device work
  sim::OpId op = sim::kNoOp;                     // the op built from it
};

/// The step's units in start order: the layer events of the thread that recorded the step under
/// its event (annotations looked through, the data loader skipped), the top-level layer events
/// of other threads inside the window (the autograd engine's backward nodes), and the collectives
/// of every thread (communication ops are not looked into for layer events).
std::vector<Unit> collect_units(const KinetoTrace& trace, const Nesting& nesting,
                                const StepWindow& step);

/// The device streams of a step: raw stream ids by index (0 the compute stream) and, with several,
/// their labels (Workload::streams).
struct StepStreams {
  std::vector<std::int64_t> raw;
  std::vector<std::string> labels;  // empty with one stream
};

/// Sets each unit's device time per stream and its first launches (Note [Device time]); without
/// device work (`gpu` false) a unit's device time is its CPU duration, all on one stream.
StepStreams attribute_device_time(const KinetoTrace& trace, const StepWindow& step, bool gpu,
                                  std::vector<Unit>& units);

/// Sets each unit's workspace: the memory it allocated and freed again on its own thread (cuDNN
/// workspace), its peak above its start less what it keeps.
void measure_workspace(const KinetoTrace& trace, bool gpu, std::vector<Unit>& units);

}  // namespace memplan::importers::detail
