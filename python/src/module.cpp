#include <pybind11/pybind11.h>

#include <exception>
#include <new>

#include "core/host_memory.hpp"
#include "core/input_error.hpp"
#include "python/src/bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "memplan's C++ libraries (thin bindings; use the `memplan` package)";
  // Bad input (a trace, a plan, an argument): the CLI's one line, as a Python ValueError.
  pybind11::register_exception<memplan::sim::InputError>(m, "InputError", PyExc_ValueError);
  // Out of memory: a MemoryError, never an abort of the interpreter (core/host_memory.hpp); the
  // reserve released for it is taken again for the next call.
  memplan::sim::hold_memory_reserve();
  // pybind11's translator is a void(*)(std::exception_ptr): the parameter by value.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  pybind11::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      memplan::sim::hold_memory_reserve();
      PyErr_SetString(PyExc_MemoryError,
                      "memplan: out of memory: the call needed more memory than this machine "
                      "gave it");
    }
  });
  memplan::python::bind_traces(m);
  memplan::python::bind_plans(m);
  memplan::python::bind_simulation(m);
  memplan::python::bind_search(m);
  memplan::python::bind_jobs(m);
  memplan::python::bind_validation(m);
  memplan::python::bind_layers(m);
}
