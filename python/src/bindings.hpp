#pragma once
// The extension module memplan._core: thin pybind11 bindings of the C++ libraries, one function
// per part. Each binding converts its arguments, calls the library and converts the result;
// results that the CLI prints as JSON cross as the same JSON text. The Python package
// (python/memplan/) builds its objects on these; users import `memplan`, not `_core`.
#include <functional>
#include <memory>
#include <optional>

#include <pybind11/pybind11.h>

#include "core/job.hpp"
#include "core/workload.hpp"
#include "search/engine/plan_search.hpp"

namespace memplan::python {

/// Workloads cross into Python shared (pybind11 holders are not const), so that results can keep
/// theirs alive; nothing changes a workload once it is made.
using WorkloadPtr = std::shared_ptr<sim::Workload>;
/// A job's ranks cross as Workloads that share the job (the aliasing shared_ptr), so a rank's
/// Trace keeps its job alive.
using JobPtr = std::shared_ptr<sim::Job>;

/// Runs `run` (a search with `options`) without the GIL. `progress`, when given, is called (with
/// the GIL) for every seeding policy and after every round until it returns False, which sets the
/// search's cancel flag; an exception in it sets the flag too and is raised once `run` has
/// returned. Returns whether the search was cancelled.
bool search_with_progress(search::SearchOptions& options,
                          const std::optional<pybind11::function>& progress,
                          const std::function<void()>& run);

void bind_traces(pybind11::module_& m);      // Workload, read/write, zoo, import, info
void bind_plans(pybind11::module_& m);       // Machine, Plan, plan files, named plans, encodings
void bind_simulation(pybind11::module_& m);  // simulate, compare
void bind_search(pybind11::module_& m);      // search, sweep
void bind_jobs(pybind11::module_& m);        // Job: read, import, simulate, compare, search
void bind_validation(pybind11::module_& m);  // validate on the host backend
void bind_layers(pybind11::module_& m);      // the aten table of the layer vocabulary

}  // namespace memplan::python
