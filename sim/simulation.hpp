#pragma once
// Simulation: a plan lowered and simulated, the Program and its predicted Timeline kept together
// (the Timeline's spans index into the Program's streams). A command lowers its plan once, into
// a Simulation, and every later stage reads that one: the search returns its winner's, the
// reports and exports print it, validation runs its Program on a backend and sets the measured
// Timeline beside its prediction.
#include "sim/engine.hpp"
#include "sim/machine.hpp"
#include "sim/plan.hpp"
#include "sim/program.hpp"
#include "sim/timeline.hpp"
#include "sim/workload.hpp"

namespace memplan::sim {

struct Simulation {
  Program program;
  Timeline timeline;
};

/// Lowers `plan` (validated for `workload`) and simulates it on `machine`.
Simulation simulate_plan(const Workload& workload, const Plan& plan, const Machine& machine,
                         const EngineOptions& options = {});

}  // namespace memplan::sim
