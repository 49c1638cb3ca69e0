#pragma once
// The units of a step: the events the importer turns into ops or folds into them (Note [Kineto
// dataflow] in dataflow.cpp says which), and what each cost — the device time of the kernels and
// memsets it launched and the scratch memory it allocated and freed again.
//
// Device time (Note [Device time]): each kernel or memset is linked to its launch (correlation
// id, else external id) and counted for the unit whose time window on the launching thread holds
// the launch; one launched inside the step but outside every unit (a communication thread, a
// hook) counts for the unit that started last before it. Kernels on several streams overlap
// while the imported step runs its ops one at a time, so each activity counts only for the time
// it adds to the device's busy union: the units' device times add up to the recorded busy time,
// and communication beside compute is not charged twice. Copies are link traffic, not compute.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/ids.hpp"
#include "core/layer.hpp"
#include "core/units.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"

namespace memplan::importers::detail {

struct Unit {
  enum class Role : std::uint8_t { kForward, kBackward, kUpdate, kGlue };
  /// A forward event that is no op: the tensor it reads under another shape (a view) or in
  /// another place or layout (a device copy, contiguous).
  enum class Alias : std::uint8_t { kNone, kView, kCopy };

  std::size_t event = 0;  // in trace.cpu_events
  Role role = Role::kGlue;
  sim::LayerType layer;      // a forward op's layer; a generic one keeps its aten name
  bool convolution = false;  // a forward op built by the convolution rule (conv1d: Note [conv1d])
  Alias alias = Alias::kNone;
  sim::Nanoseconds device_ns = 0;
  sim::Bytes workspace = 0;
  std::optional<std::int64_t> sequence;          // a backward node's sequence number
  std::set<std::int64_t> sequences;              // a forward op's: every number in its subtree
  std::optional<sim::Nanoseconds> first_launch;  // the first launch of its device work
  sim::OpId op = sim::kNoOp;                     // the op built from it
};

/// The step's units in start order: the layer events of the thread that recorded the step under
/// its event (annotations looked through, the data loader skipped), and the top-level layer
/// events of other threads inside the window (the autograd engine's backward nodes).
std::vector<Unit> collect_units(const KinetoTrace& trace, const Nesting& nesting,
                                const StepWindow& step);

/// Sets each unit's device_ns and first_launch (Note [Device time]); without device work (`gpu`
/// false) a unit's device time is its CPU duration.
void attribute_device_time(const KinetoTrace& trace, const StepWindow& step, bool gpu,
                           std::vector<Unit>& units);

/// Sets each unit's workspace: the memory it allocated and freed again on its own thread (cuDNN
/// workspace), its peak above its start less what it keeps.
void measure_workspace(const KinetoTrace& trace, bool gpu, std::vector<Unit>& units);

}  // namespace memplan::importers::detail
