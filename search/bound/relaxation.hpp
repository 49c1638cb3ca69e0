#pragma once
// Relaxation: what the lower bound's linear program is made of (Note [Lower bound on a plan's
// time] in lower_bound.cpp), for one place of the update (device or host): per op, the bytes no
// plan can take off the device, its shortest time on the compute stream and the earliest its run
// can start; and every stretch of ops over which a plan may take a tensor off the device (an
// Absence), with what leaving and coming back costs each way.
#include <cstdint>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/policies/gist.hpp"

namespace memplan::search {

/// The in-core plan with every op's fastest algorithm on a device without a memory limit: when
/// each op's run starts and ends on the compute stream (0 for ops of other streams), and the step.
/// No plan's run of an op starts or ends earlier (Note [Lower bound on a plan's time]).
struct IdealRun {
  sim::Nanoseconds iteration_ns = 0;
  /// The step back to back (sim::step_period_ns) when the workload has a host side; else 0.
  sim::Nanoseconds period_ns = 0;
  std::vector<sim::Nanoseconds> start_ns;
  std::vector<sim::Nanoseconds> end_ns;
};

IdealRun ideal_run(const sim::Workload& workload, const sim::Machine& machine);

/// A stretch of ops (first..last) over which a plan may hold a tensor off the device, and the
/// device use after it (`next`) that needs it back.
struct Absence {
  sim::TensorId tensor = sim::kNoTensor;
  sim::Bytes bytes = 0;  // on the device (aligned)
  sim::OpId first = sim::kNoOp;
  sim::OpId last = sim::kNoOp;
  sim::OpId next = sim::kNoOp;
  /// Away by a copy: the copy-out before it leaves (0: its home is the host already), which starts
  /// no earlier than `release_ns` (negative: no such time is known, Relaxation::start_ns), and the
  /// copy-in before `next` (0 when `next` needs none).
  bool copy = false;
  sim::Nanoseconds copy_out_ns = 0;
  sim::Nanoseconds release_ns = 0;
  sim::Nanoseconds copy_in_ns = 0;
  /// A parameter or optimizer state on the host that an update on the device writes: its copy is
  /// written back after that update (ending no earlier than `writeback_after_ns`), whenever it is
  /// away anywhere (it is then host-placed).
  sim::Nanoseconds writeback_ns = 0;
  sim::Nanoseconds writeback_after_ns = 0;
  /// Away by recomputation: the ops re-run to bring it back when it is away at a forward op
  /// (its producer and the producers of the dropped activations it is made from), and at a later
  /// op (its producer alone).
  bool recompute = false;
  std::vector<sim::OpId> rerun_forward;
  /// The tensors its producer reads that stay on the device until its regeneration
  /// (Relaxation::kept_inputs, by index).
  std::vector<std::size_t> kept_inputs;
  /// Away in an encoded copy: each encoding allowed, with its encoded bytes (aligned); the encode
  /// and the decode take codec_ns each.
  std::vector<std::pair<sim::Encoding, sim::Bytes>> encodings;
  sim::Nanoseconds codec_ns = 0;
};

/// One algorithm of an op with alternatives (Op::algorithms and its default): what it takes over
/// the op's fastest time (min_ns) and over the smallest workspace (counted in base), aligned.
struct AlgorithmCost {
  sim::Nanoseconds extra_ns = 0;
  sim::Bytes extra_bytes = 0;
};

/// A pre-existing tensor that is not held to the end and that no plan of the case places on the
/// host (the input batch, without host placement): the lowering keeps its device buffer until its
/// last reference, a regeneration's re-run included. Every plan holds it to `last_use` (its last
/// device use, in Relaxation::base); after it, while an absence whose producer reads it is away by
/// recomputation.
struct KeptInput {
  sim::TensorId tensor = sim::kNoTensor;
  sim::Bytes bytes = 0;  // aligned
  sim::OpId last_use = sim::kNoOp;
};

/// The time a relaxation's times count from (Note [A bound on the step back to back] in
/// lower_bound.cpp): the step's start, for the step run alone (the ideal run's times are floors,
/// and its end is the step's); or the start of the step's first instruction on the compute
/// stream, for the step back to back (only the compute stream's own work is a floor, and its end
/// is that of the step's last instruction there, which the period bounds).
enum class TimeOrigin : std::uint8_t { kStepStart, kComputeStart };

struct Relaxation {
  TimeOrigin origin = TimeOrigin::kStepStart;
  bool host_update = false;
  /// Per op: whether it runs on the device in this case (not an update op run on the host), and
  /// whether on the compute stream (its start and end are the bound's pressure points).
  std::vector<bool> on_device;
  std::vector<bool> on_compute;
  /// Per op: its shortest duration on the compute stream (0 off it); the compute stream's
  /// shortest work before it and from it to the end (tail_ns has one more entry: 0).
  std::vector<sim::Nanoseconds> min_ns;
  std::vector<sim::Nanoseconds> before_ns;
  std::vector<sim::Nanoseconds> tail_ns;
  /// Per op: the earliest its run may start and end in any plan of this case, from the origin (0
  /// when not known from the step's start; negative when not known from the compute stream's,
  /// before which an op of another stream may run).
  std::vector<sim::Nanoseconds> start_ns;
  std::vector<sim::Nanoseconds> end_ns;
  /// Per op: the bytes every plan holds on the device at it (the op's own tensors and smallest
  /// workspace, and everything no plan can take off the device across it), aligned.
  std::vector<sim::Bytes> base;
  /// Per op of the compute stream with alternative algorithms: each one's cost (an op's
  /// workspace is live at the op alone, so at a pressure point the op's choice trades its time
  /// against its memory there); empty for the others.
  std::vector<std::vector<AlgorithmCost>> algorithms;
  std::vector<Absence> absences;
  std::vector<KeptInput> kept_inputs;
  /// Ops before this one are forward ops at which every regeneration is still to come (all
  /// forward ops come first): Absence::rerun_forward applies there.
  sim::OpId forward_end = sim::OpId{0};
  /// The floor of this case: no plan of it is faster (the ideal step, or the host update's; from
  /// the compute stream's start, its work).
  sim::Nanoseconds floor_ns = 0;
  /// The compute stream's work in this case, each op at its shortest.
  sim::Nanoseconds busy_ns = 0;
};

/// The work a plan that updates on the host gives, each step, to the host stream (every update
/// op's host run, priced as the engine prices it or lower) and to the device-to-host engine (the
/// copy-out of every gradient an update op reads and the step writes).
struct HostUpdateWork {
  sim::Nanoseconds host_ns = 0;
  sim::Nanoseconds copy_out_ns = 0;
};
HostUpdateWork host_update_work(const sim::Workload& workload, const sim::Machine& machine);

/// A producer of gradients that a plan updating on the host copies out (`producer`, an op of the
/// compute stream), and the least time from the end of its run to the end of the host's update
/// work: a gradient's copy-out, then the host stream's update ops in order from the first that
/// reads it. One per producer, the longest of its gradients'.
struct UpdateChain {
  sim::OpId producer = sim::kNoOp;
  sim::Nanoseconds after_ns = 0;
};
std::vector<UpdateChain> update_chains(const sim::Workload& workload, const sim::Machine& machine);

/// The relaxation of the plans that update on the device (`host_update` false) or on the host,
/// for plans that may use `encodings` and, with `host_placement`, place tensors that are not
/// feature maps on the host; its times from `origin`.
Relaxation relax(const sim::Workload& workload, const sim::Machine& machine,
                 const EncodingOptions& encodings, bool host_placement, bool host_update,
                 const IdealRun& ideal, TimeOrigin origin = TimeOrigin::kStepStart);

/// The relaxation `r` (its times from the step's start) cut at op `q` of the compute stream: its
/// program's value bounds the end of q's run (Note [A bound on the step back to back]: a host
/// that waits for q). Ops after q are no pressure points and add no work; an absence that comes
/// back after q is away at no cost; no write-back (they follow the update) counts.
Relaxation until(const Relaxation& r, sim::OpId q);

}  // namespace memplan::search
