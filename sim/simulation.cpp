#include "sim/simulation.hpp"

#include "sim/lowering.hpp"

namespace memplan::sim {

Simulation simulate_plan(const Workload& workload, const Plan& plan, const Machine& machine,
                         const EngineOptions& options) {
  Simulation s{lower(workload, plan), {}};
  Engine engine;
  s.timeline = engine.run(s.program, machine, options);
  s.timeline.period_ns =
      step_period_ns(s.program, machine, s.timeline, options.collective_ready_ns);
  return s;
}

}  // namespace memplan::sim
