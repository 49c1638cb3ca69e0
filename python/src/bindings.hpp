#pragma once
// The extension module memplan._core: thin pybind11 bindings of the C++ libraries, one function
// per part. Each binding converts its arguments, calls the library and converts the result;
// results that the CLI prints as JSON cross as the same JSON text. The Python package
// (python/memplan/) builds its objects on these; users import `memplan`, not `_core`.
#include <memory>

#include <pybind11/pybind11.h>

#include "core/workload.hpp"

namespace memplan::python {

/// Workloads cross into Python shared (pybind11 holders are not const), so that results can keep
/// theirs alive; nothing changes a workload once it is made.
using WorkloadPtr = std::shared_ptr<sim::Workload>;

void bind_traces(pybind11::module_& m);      // Workload, read/write, zoo, import, info
void bind_plans(pybind11::module_& m);       // Machine, Plan, plan files, named plans, encodings
void bind_simulation(pybind11::module_& m);  // simulate, compare
void bind_search(pybind11::module_& m);      // search, sweep
void bind_validation(pybind11::module_& m);  // validate on the host backend
void bind_layers(pybind11::module_& m);      // the aten table of the layer vocabulary

}  // namespace memplan::python
