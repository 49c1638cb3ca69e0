// search (the plan search, with a Python progress callback that can stop it) and sweep (a grid of
// traces, memories and links, returned as the CSV `memplan sweep` writes).
#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "python/src/bindings.hpp"
#include "search/plan_search.hpp"
#include "search/sweep.hpp"
#include "sim/units.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

struct SearchArguments {
  int threads = 0;
  double time_limit_s = 10.0;
  std::size_t rounds = 0;
  std::uint64_t seed = 1;
  bool deterministic = false;
  bool maps_only = false;
  std::string encode;
};

struct SearchOutcome {
  search::SearchResult result;
  bool cancelled = false;  // the callback returned False
};

// Calls `progress` (with the GIL) for every seeding policy and after every round until False
// from it, or an exception, sets the search's cancel flag. An exception is kept and raised again
// once the search has returned.
SearchOutcome run_search(const sim::Workload& workload, const sim::Machine& machine,
                         const SearchArguments& a, const std::optional<py::function>& progress) {
  search::SearchOptions options;
  options.threads = a.threads;
  options.time_limit_s = a.time_limit_s;
  options.max_rounds = a.rounds;
  options.seed = a.seed;
  options.deterministic = a.deterministic;
  options.host_placement = !a.maps_only;
  options.encodings = search::parse_encoding_options(a.encode, "--encode");
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
  SearchOutcome outcome;
  {
    py::gil_scoped_release released;
    outcome.result = search::search_plan(workload, machine, options);
  }
  if (error) throw std::move(*error);
  outcome.cancelled = cancel;
  return outcome;
}

struct SweepArguments {
  std::vector<std::pair<std::string, WorkloadPtr>> traces;
  std::vector<std::string> memories;  // empty: each trace's
  std::vector<std::string> links;
  std::vector<std::string> bandwidths;
  std::vector<std::string> policies;  // empty: every policy
  bool search = true;
  int threads = 0;
  std::string encode;
  double search_time_limit_s = 10.0;
  std::size_t search_rounds = 0;
  std::uint64_t seed = 1;
};

// The grid as `memplan sweep` builds it from its flags; the CSV it writes. `progress` is called
// (with the GIL) after every cell; an exception in it is raised once the sweep has returned.
std::string run_sweep(const SweepArguments& a, const std::optional<py::function>& progress) {
  search::SweepGrid grid;
  for (const auto& [name, workload] : a.traces) grid.traces.push_back({name, *workload});
  for (const std::string& text : a.memories) {
    grid.memories.emplace_back(sim::parse_bytes(text, "--memory"));
  }
  grid.links = search::sweep_links(a.links, a.bandwidths);
  grid.policies = a.policies;
  grid.search = a.search;
  search::SweepOptions options;
  options.threads = a.threads;
  options.encodings = search::parse_encoding_options(a.encode, "--encode");
  options.search.time_limit_s = a.search_time_limit_s;
  options.search.max_rounds = a.search_rounds;
  options.search.seed = a.seed;
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
  py::class_<SearchArguments>(m, "SearchArguments")
      .def(py::init<>())
      .def_readwrite("threads", &SearchArguments::threads)
      .def_readwrite("time_limit_s", &SearchArguments::time_limit_s)
      .def_readwrite("rounds", &SearchArguments::rounds)
      .def_readwrite("seed", &SearchArguments::seed)
      .def_readwrite("deterministic", &SearchArguments::deterministic)
      .def_readwrite("maps_only", &SearchArguments::maps_only)
      .def_readwrite("encode", &SearchArguments::encode);
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
      .def_property_readonly("elapsed_s", [](const SearchOutcome& o) { return o.result.elapsed_s; })
      .def_readonly("cancelled", &SearchOutcome::cancelled);
  m.def("search", &run_search, py::arg("workload"), py::arg("machine"), py::arg("arguments"),
        py::arg("progress"));

  py::class_<SweepArguments>(m, "SweepArguments")
      .def(py::init<>())
      .def_readwrite("traces", &SweepArguments::traces)
      .def_readwrite("memories", &SweepArguments::memories)
      .def_readwrite("links", &SweepArguments::links)
      .def_readwrite("bandwidths", &SweepArguments::bandwidths)
      .def_readwrite("policies", &SweepArguments::policies)
      .def_readwrite("search", &SweepArguments::search)
      .def_readwrite("threads", &SweepArguments::threads)
      .def_readwrite("encode", &SweepArguments::encode)
      .def_readwrite("search_time_limit_s", &SweepArguments::search_time_limit_s)
      .def_readwrite("search_rounds", &SweepArguments::search_rounds)
      .def_readwrite("seed", &SweepArguments::seed);
  py::class_<search::SweepProgress>(m, "SweepProgress")
      .def_readonly("done", &search::SweepProgress::done)
      .def_readonly("total", &search::SweepProgress::total)
      .def_readonly("elapsed_s", &search::SweepProgress::elapsed_s);
  m.def("sweep", &run_sweep, py::arg("arguments"), py::arg("progress"));
}

}  // namespace memplan::python
