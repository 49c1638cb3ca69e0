#pragma once
// The speed of this machine's CPU at host ops (an update on the host, Note [Host placement] in
// core/plan.hpp), measured the way the simulator prices them: Machine::host_op_ns charges a host op
// the bytes it streams (every operand read, the resident ones written back) at the host
// bandwidth, so the measurement runs the host's own update loop (sgd_momentum_update, the code
// both backends' host ops run) over arrays larger than the caches and divides the bytes so counted
// by the median time. `memplan record` writes it into the trace's device, and validation prices
// the plan's host ops with it, so a host update is predicted at the speed it will run.
#include "core/units.hpp"

namespace memplan::runtime {

/// Bytes per second the host streams in an SGD-with-momentum update of `parameter_bytes` (float32)
/// of parameters: 5 × parameter_bytes (parameters, gradients and momenta read; parameters and
/// momenta written) over the median of `runs` timed updates after one untimed one.
sim::BytesPerSecond measure_host_op_bandwidth(sim::Bytes parameter_bytes = sim::Bytes{32} << 20,
                                              int runs = 5);

}  // namespace memplan::runtime
