// search (the plan search, with a Python progress callback that can stop it) and sweep (a grid of
// traces, memories and links, returned as the CSV `memplan sweep` writes).
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <nlohmann/json.hpp>

#include "python/src/bindings.hpp"
#include "requests/search_request.hpp"
#include "search/bound/lower_bound.hpp"
#include "search/engine/plan_search.hpp"
#include "search/studies/sweep.hpp"

namespace py = pybind11;

namespace memplan::python {

bool search_with_progress(search::SearchOptions& options,
                          const std::optional<py::function>& progress,
                          const std::function<void()>& run) {
  std::atomic<bool> cancel{false};
  std::optional<py::error_already_set> error;
  options.cancel = &cancel;
  if (progress) {
    options.on_progress = [&](const search::SearchProgress& p) {
      if (cancel) return;  // asked to stop: seeding policies still finishing report to no one
      py::gil_scoped_acquire gil;
      try {
        if ((*progress)(p).equal(py::bool_(false))) cancel = true;
      } catch (py::error_already_set& e) {
        error = std::move(e);
        cancel = true;
      }
    };
  }
  {
    py::gil_scoped_release released;
    run();
  }
  options.cancel = nullptr;  // both point into this frame
  options.on_progress = nullptr;
  if (error) throw std::move(*error);
  return cancel;
}

namespace {

struct SearchOutcome {
  search::SearchResult result;
  bool cancelled = false;  // the callback returned False
};

SearchOutcome run_search(const sim::Workload& workload, const sim::Machine& machine,
                         const requests::SearchRequest& request,
                         const std::optional<py::function>& progress) {
  search::SearchOptions options = requests::search_options(request);
  SearchOutcome outcome;
  outcome.cancelled = search_with_progress(
      options, progress, [&] { outcome.result = search::search_plan(workload, machine, options); });
  return outcome;
}

// What Python gives a sweep: the traces and jobs, already read, and the request, as the CLI's
// flags give it.
struct SweepArguments {
  std::vector<std::pair<std::string, std::variant<WorkloadPtr, JobPtr>>> traces;
  requests::SweepRequest request;
};

// The grid as `memplan sweep` builds it from its flags; the CSV it writes. `progress` is called
// (with the GIL) after every cell; an exception in it is raised once the sweep has returned.
std::string run_sweep(const SweepArguments& a, const std::optional<py::function>& progress) {
  std::vector<search::SweepTrace> traces;
  for (const auto& [name, read] : a.traces) {
    const auto* job = std::get_if<JobPtr>(&read);
    traces.push_back(
        search::sweep_trace(name, job ? **job : sim::Job{{*std::get<WorkloadPtr>(read)}}));
  }
  const search::SweepGrid grid = requests::sweep_grid(std::move(traces), a.request);
  search::SweepOptions options = requests::sweep_options(a.request);
  std::optional<py::error_already_set> error;
  if (progress) {
    options.on_progress = [&](const search::SweepProgress& p) {
      py::gil_scoped_acquire gil;
      if (error) return;
      try {
        (*progress)(p);
      } catch (py::error_already_set& e) {
        error = std::move(e);
      }
    };
  }
  std::vector<search::SweepRow> rows;
  {
    py::gil_scoped_release released;
    rows = search::run_sweep(grid, options);
  }
  if (error) throw std::move(*error);
  return search::sweep_csv(rows);
}

}  // namespace

void bind_search(py::module_& m) {
  py::class_<search::Evaluation>(m, "Evaluation")
      .def_readonly("feasible", &search::Evaluation::feasible)
      .def_readonly("step_ns", &search::Evaluation::step_ns)
      .def_readonly("iteration_ns", &search::Evaluation::iteration_ns)
      .def_readonly("peak_bytes", &search::Evaluation::peak_bytes)
      .def_readonly("peak_reserved_bytes", &search::Evaluation::peak_reserved_bytes)
      .def_readonly("stall_ns", &search::Evaluation::stall_ns);
  py::class_<search::SearchProgress>(m, "SearchProgress")
      .def_readonly("stage", &search::SearchProgress::stage)
      .def_readonly("policy", &search::SearchProgress::policy)
      .def_readonly("round", &search::SearchProgress::round)
      .def_readonly("evaluated", &search::SearchProgress::evaluated)
      .def_readonly("best", &search::SearchProgress::best)
      .def_readonly("elapsed_s", &search::SearchProgress::elapsed_s);
  py::class_<requests::SearchRequest>(m, "SearchRequest")
      .def(py::init<>())
      .def_readwrite("threads", &requests::SearchRequest::threads)
      .def_readwrite("time_limit_s", &requests::SearchRequest::time_limit_s)
      .def_readwrite("rounds", &requests::SearchRequest::rounds)
      .def_readwrite("seed", &requests::SearchRequest::seed)
      .def_readwrite("deterministic", &requests::SearchRequest::deterministic)
      .def_readwrite("maps_only", &requests::SearchRequest::maps_only)
      .def_readwrite("encode", &requests::SearchRequest::encode)
      .def_readwrite("gap", &requests::SearchRequest::gap);
  py::class_<SearchOutcome>(m, "SearchOutcome")
      .def_property_readonly("plan", [](const SearchOutcome& o) { return o.result.plan; })
      .def_property_readonly("evaluation",
                             [](const SearchOutcome& o) { return o.result.evaluation; })
      .def_property_readonly("best_policy",
                             [](const SearchOutcome& o) { return o.result.best_policy; })
      .def_property_readonly("best_policy_evaluation",
                             [](const SearchOutcome& o) { return o.result.best_policy_evaluation; })
      .def_property_readonly("evaluated", [](const SearchOutcome& o) { return o.result.evaluated; })
      .def_property_readonly("rounds", [](const SearchOutcome& o) { return o.result.rounds; })
      .def_property_readonly("converged", [](const SearchOutcome& o) { return o.result.converged; })
      .def_property_readonly("within_gap",
                             [](const SearchOutcome& o) { return o.result.within_gap; })
      .def_property_readonly("elapsed_s", [](const SearchOutcome& o) { return o.result.elapsed_s; })
      .def_property_readonly("bound_json",  // lower_bound_s, period_lower_bound_s and gap, as
                                            // `memplan search --json`
                             [](const SearchOutcome& o) {
                               nlohmann::json j = nlohmann::json::object();
                               const sim::Timeline& t = o.result.simulation.timeline;
                               if (o.result.lower_bound)
                                 search::add_bound_json(j, *o.result.lower_bound,
                                                        search::bounded_step(t));
                               return j.dump();
                             })
      .def_readonly("cancelled", &SearchOutcome::cancelled);
  m.def("search", &run_search, py::arg("workload"), py::arg("machine"), py::arg("arguments"),
        py::arg("progress"));

  py::class_<requests::SweepRequest>(m, "SweepRequest")
      .def(py::init<>())
      .def_readwrite("memories", &requests::SweepRequest::memories)
      .def_readwrite("links", &requests::SweepRequest::links)
      .def_readwrite("bandwidths", &requests::SweepRequest::bandwidths)
      .def_readwrite("policies", &requests::SweepRequest::policies)
      .def_readwrite("search", &requests::SweepRequest::search)
      .def_readwrite("threads", &requests::SweepRequest::threads)
      .def_readwrite("encode", &requests::SweepRequest::encode)
      .def_readwrite("search_time_limit_s", &requests::SweepRequest::search_time_limit_s)
      .def_readwrite("search_rounds", &requests::SweepRequest::search_rounds)
      .def_readwrite("seed", &requests::SweepRequest::seed)
      .def_readwrite("interconnects", &requests::SweepRequest::interconnects)
      .def_readwrite("gpus_per_node", &requests::SweepRequest::gpus_per_node)
      .def_readwrite("world_sizes", &requests::SweepRequest::world_sizes);
  py::class_<SweepArguments>(m, "SweepArguments")
      .def(py::init<>())
      .def_readwrite("traces", &SweepArguments::traces)
      .def_readwrite("request", &SweepArguments::request);
  py::class_<search::SweepProgress>(m, "SweepProgress")
      .def_readonly("done", &search::SweepProgress::done)
      .def_readonly("total", &search::SweepProgress::total)
      .def_readonly("elapsed_s", &search::SweepProgress::elapsed_s);
  m.def("sweep", &run_sweep, py::arg("arguments"), py::arg("progress"));
}

}  // namespace memplan::python
