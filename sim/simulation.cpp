#include "sim/simulation.hpp"

#include "sim/lowering.hpp"

namespace memplan::sim {

Simulation simulate_plan(const Workload& workload, const Plan& plan, const Machine& machine,
                         const EngineOptions& options) {
  Simulation s{lower(workload, plan), {}};
  Engine engine;
  s.timeline = engine.run(s.program, machine, options);
  set_step_period(s.timeline, s.program, machine, options.collective_ready_ns);
  return s;
}

}  // namespace memplan::sim
