#pragma once
// Simulation: a plan lowered and simulated, the Program and its predicted Timeline kept together
// (the Timeline's spans index into the Program's streams). A command lowers its plan once, into
// a Simulation, and every later stage reads that one: the search returns its winner's, the
// reports and exports print it, validation runs its Program on a backend and sets the measured
// Timeline beside its prediction.
#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "sim/engine.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

struct Simulation {
  Program program;
  Timeline timeline;
};

/// Lowers `plan` (validated for `workload`) and simulates it on `machine`; the period (Note [Step
/// period] in sim/engine.hpp) with the collectives at `options`' ready times.
Simulation simulate_plan(const Workload& workload, const Plan& plan, const Machine& machine,
                         const EngineOptions& options = {});

}  // namespace memplan::sim
