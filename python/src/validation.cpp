// validate: a plan run for real on the host backend against the simulator's prediction and the
// in-core run (runtime::validate), the report's fields as they are.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "host_backend/host_backend.hpp"
#include "python/src/bindings.hpp"
#include "runtime/validation.hpp"
#include "sim/input_error.hpp"
#include "sim/simulation.hpp"
#include "sim/timeline_export.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

// As `memplan validate --backend host`: a backend's refusal (a layer it cannot run) is bad input.
// The report, and the one-line diagnosis when the run ran out of memory.
std::pair<runtime::ValidationReport, std::optional<std::string>> validate_on_host(
    const sim::Workload& workload, const sim::Plan& plan, const sim::Machine& machine,
    std::uint64_t seed, bool calibrate) {
  const host_backend::HostBackend backend{};
  runtime::ValidationOptions options;
  options.seed = seed;
  options.calibrate = calibrate;
  const sim::Simulation predicted = sim::simulate_plan(workload, plan, machine);  // lowered once
  runtime::ValidationReport report;
  try {
    report = runtime::validate(backend, workload, plan, predicted, machine, options);
  } catch (const sim::InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw sim::InputError("--backend host", e.what());
  }
  std::optional<std::string> oom;
  if (report.oom) oom = sim::oom_to_text(*report.oom, predicted.program, workload);
  return {report, std::move(oom)};
}

}  // namespace

void bind_validation(py::module_& m) {
  using R = runtime::ValidationReport;
  py::class_<runtime::Tolerance>(m, "Tolerance")
      .def_readonly("bitwise", &runtime::Tolerance::bitwise)
      .def_readonly("relative", &runtime::Tolerance::relative)
      .def_readonly("narrowed_maps", &runtime::Tolerance::narrowed_maps)
      .def_readonly("unit_roundoff", &runtime::Tolerance::unit_roundoff);
  py::class_<R>(m, "ValidationReport")
      .def_readonly("predicted_feasible", &R::predicted_feasible)
      .def_readonly("measured_feasible", &R::measured_feasible)
      .def_readonly("peak_bytes_predicted", &R::peak_bytes_predicted)
      .def_readonly("peak_bytes_measured", &R::peak_bytes_measured)
      .def_readonly("peak_reserved_predicted", &R::peak_reserved_predicted)
      .def_readonly("peak_reserved_measured", &R::peak_reserved_measured)
      .def_readonly("iteration_ns_predicted", &R::iteration_ns_predicted)
      .def_readonly("iteration_ns_measured", &R::iteration_ns_measured)
      .def_readonly("gradients_match", &R::gradients_match)
      .def_readonly("bitwise_equal", &R::bitwise_equal)
      .def_readonly("tolerance", &R::tolerance)
      .def_readonly("max_abs_diff", &R::max_abs_diff)
      .def_readonly("max_rel_diff", &R::max_rel_diff)
      .def_readonly("max_tensor_rel_diff", &R::max_tensor_rel_diff)
      .def_readonly("tensors_compared", &R::tensors_compared)
      .def_readonly("spilled_bytes", &R::spilled_bytes)
      .def_readonly("calibrated", &R::calibrated)
      .def("iteration_error_percent", &R::iteration_error_percent)
      .def("peaks_match", &R::peaks_match)
      .def("failures", [](const R& r) { return runtime::validation_failures(r); });
  m.def("validate_on_host", &validate_on_host, py::arg("workload"), py::arg("plan"),
        py::arg("machine"), py::arg("seed"), py::arg("calibrate"),
        py::call_guard<py::gil_scoped_release>());
  m.attr("TOLERANCE_FACTOR") = runtime::kToleranceFactor;
  m.attr("MAX_RELATIVE_TOLERANCE") = runtime::kMaxRelativeTolerance;
}

}  // namespace memplan::python
