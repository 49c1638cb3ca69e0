// simulate (one plan on one machine) and compare (every policy), with their exports: the JSON
// summaries `memplan simulate --json` and `memplan compare --json` print, the memory CSV and the
// Chrome trace.
#include <optional>
#include <string>

#include <pybind11/stl.h>

#include "io/memory_snapshot_export.hpp"
#include "io/timeline_export.hpp"
#include "python/src/bindings.hpp"
#include "search/studies/comparison.hpp"
#include "sim/simulation.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

// One simulated plan: what `memplan simulate` computes before it prints.
struct Simulation {
  WorkloadPtr workload;
  sim::Machine machine;
  sim::Program program;
  sim::Timeline timeline;
};

Simulation simulate(const WorkloadPtr& workload, const sim::Plan& plan,
                    const sim::Machine& machine) {
  sim::Simulation simulated = sim::simulate_plan(*workload, plan, machine);
  return {workload, machine, std::move(simulated.program), std::move(simulated.timeline)};
}

struct Comparison {
  WorkloadPtr workload;
  sim::Machine machine;
  search::Comparison comparison;
};

}  // namespace

void bind_simulation(py::module_& m) {
  py::class_<Simulation>(m, "Simulation")
      .def_property_readonly("feasible", [](const Simulation& s) { return s.timeline.feasible; })
      .def_property_readonly("iteration_ns",
                             [](const Simulation& s) { return s.timeline.iteration_ns; })
      .def_property_readonly("peak_bytes",
                             [](const Simulation& s) { return s.timeline.peak_bytes; })
      .def("summary_json",
           [](const Simulation& s) {
             return sim::summary_json(s.timeline, s.program, *s.workload, s.machine).dump();
           })
      .def(
          "summary_text",
          [](const Simulation& s, const std::string& policy) {
            return sim::summary_text(s.timeline, s.program, *s.workload, s.machine, policy);
          },
          py::arg("policy"))
      .def("oom_text",
           [](const Simulation& s) -> std::optional<std::string> {
             if (s.timeline.feasible) return std::nullopt;
             return sim::why_not_text(s.timeline, s.program, *s.workload);
           })
      .def("memory_csv", [](const Simulation& s) { return sim::memory_csv(s.timeline); })
      .def("memory_snapshot",
           [](const Simulation& s) {
             return py::bytes(
                 sim::memory_snapshot_pickle(s.timeline, s.program, *s.workload, s.machine));
           })
      .def("chrome_trace_json", [](const Simulation& s) {
        return sim::chrome_trace_json(s.timeline, s.program, *s.workload);
      });
  m.def("simulate", &simulate, py::arg("workload"), py::arg("plan"), py::arg("machine"),
        py::call_guard<py::gil_scoped_release>());

  py::class_<Comparison>(m, "Comparison")
      .def("json",
           [](const Comparison& c) {
             return search::comparison_json(c.comparison, *c.workload, c.machine).dump();
           })
      .def("text",
           [](const Comparison& c) {
             return search::comparison_text(c.comparison, *c.workload, c.machine);
           })
      .def("csv",
           [](const Comparison& c) { return search::comparison_csv(c.comparison, *c.workload); });
  m.def(
      "compare",
      [](const WorkloadPtr& w, const sim::Machine& machine, const std::string& encode) {
        const auto encodings = search::parse_encoding_options(encode, "--encode");
        return Comparison{w, machine, search::compare_policies(*w, machine, encodings)};
      },
      py::arg("workload"), py::arg("machine"), py::arg("encode"),
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace memplan::python
