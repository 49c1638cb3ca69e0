#include <pybind11/pybind11.h>

#include "core/input_error.hpp"
#include "python/src/bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "memplan's C++ libraries (thin bindings; use the `memplan` package)";
  // Bad input (a trace, a plan, an argument): the CLI's one line, as a Python ValueError.
  pybind11::register_exception<memplan::sim::InputError>(m, "InputError", PyExc_ValueError);
  memplan::python::bind_traces(m);
  memplan::python::bind_plans(m);
  memplan::python::bind_simulation(m);
  memplan::python::bind_search(m);
  memplan::python::bind_jobs(m);
  memplan::python::bind_validation(m);
  memplan::python::bind_layers(m);
}
