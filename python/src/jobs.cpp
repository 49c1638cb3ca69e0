// Jobs (trace format v3 `ranks`): the step of a job that ran on several GPUs, read, written and
// imported from the ranks' profiler files; simulated, compared and searched as `memplan simulate`,
// `compare` and `search` do with a job, their reports the same JSON and text.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "core/check.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "importers/snapshot/snapshot_allocations.hpp"
#include "io/job_report.hpp"
#include "io/plan_io.hpp"
#include "io/trace_io.hpp"
#include "python/src/bindings.hpp"
#include "requests/data_parallel_request.hpp"
#include "requests/search_request.hpp"
#include "search/policies/gist.hpp"
#include "search/studies/job_comparison.hpp"
#include "search/studies/job_search.hpp"
#include "sim/job_simulation.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

JobPtr share(sim::Job&& job) {
  return std::make_shared<sim::Job>(std::move(job));
}

// Each rank as the Workload a Trace wraps, sharing the job's ownership.
std::vector<WorkloadPtr> job_ranks(const JobPtr& job) {
  std::vector<WorkloadPtr> ranks;
  ranks.reserve(job->ranks.size());
  for (sim::Workload& w : job->ranks) ranks.emplace_back(job, &w);
  return ranks;
}

JobPtr import_kineto_job(const std::vector<std::filesystem::path>& inputs,
                         std::optional<std::int64_t> step, const std::vector<std::int32_t>& ranks,
                         const std::vector<std::filesystem::path>& snapshots,
                         std::optional<std::int64_t> snapshot_device) {
  importers::ImportOptions options;
  if (step) options.step = *step;
  const std::vector<importers::KinetoTrace> traces = importers::read_kineto_job(inputs, ranks);
  return share(
      importers::import_kineto_job(traces, options,
                                   importers::read_snapshot_allocation_histories(
                                       snapshots, snapshot_device, importers::time_zeros(traces)))
          .job);
}

// As `memplan zoo ... --data-parallel N | --fsdp N`: rank 0's step of the zoo's `step` on
// `device`; the request's fields are the keywords, None where not given.
JobPtr zoo_data_parallel_job(const WorkloadPtr& step, const std::string& device,
                             const requests::DataParallelRequest& request) {
  // zoo() asks only with a field given: any but data_parallel and fsdp needs one of them.
  MEMPLAN_CHECK(request.wanted(), "a data-parallel request names its ranks");
  return std::make_shared<sim::Job>(requests::data_parallel_job(*step, device, request).job);
}

// A job's plans simulated together: what `memplan simulate` computes for a job before it prints.
struct JobSimulation {
  JobPtr job;
  std::vector<sim::Machine> machines;
  sim::JobRun run;
};

struct JobComparison {
  JobPtr job;
  std::vector<sim::Machine> machines;
  search::JobComparison comparison;
};

struct JobSearchOutcome {
  JobPtr job;
  std::vector<sim::Machine> machines;
  search::JobSearchResult result;
  bool cancelled = false;  // the progress callback stopped the search
};

// As `memplan compare` on a job: sizes required, the encodings parsed, every policy on every rank.
JobComparison compare_job(const JobPtr& job, const std::vector<sim::Machine>& machines,
                          const std::string& encode, const std::string& source) {
  sim::require_sizes(*job, source);
  search::ComparisonOptions options;
  options.encodings = search::parse_encoding_options(encode, "--encode");
  return {job, machines, search::compare_job_policies(*job, machines, options)};
}

// As `memplan search` on a job, with search_with_progress's callback.
JobSearchOutcome search_job(const JobPtr& job, const std::vector<sim::Machine>& machines,
                            const requests::SearchRequest& request, const std::string& source,
                            const std::optional<py::function>& progress) {
  sim::require_sizes(*job, source);
  search::SearchOptions options = requests::search_options(request);
  JobSearchOutcome outcome{job, machines, {}, false};
  outcome.cancelled = search_with_progress(
      options, progress, [&] { outcome.result = search::search_job(*job, machines, options); });
  return outcome;
}

void bind_job_simulation(py::module_& m) {
  py::class_<JobSimulation>(m, "JobSimulation")
      .def_property_readonly("feasible",
                             [](const JobSimulation& s) { return s.run.timeline.feasible; })
      .def_property_readonly("step_ns",
                             [](const JobSimulation& s) { return s.run.timeline.step_ns; })
      .def("summary_json",
           [](const JobSimulation& s) {
             return sim::job_summary_json(s.run, *s.job, s.machines).dump();
           })
      .def(
          "summary_text",
          [](const JobSimulation& s, const std::string& policy) {
            return sim::job_summary_text(s.run, *s.job, s.machines, policy);
          },
          py::arg("policy"))
      .def("chrome_trace_json",
           [](const JobSimulation& s) { return sim::job_chrome_trace_json(s.run, *s.job); });
  m.def(
      "simulate_job",
      [](const JobPtr& job, const std::vector<sim::Plan>& plans,
         const std::vector<sim::Machine>& machines) {
        return JobSimulation{job, machines, sim::simulate_job(*job, plans, machines)};
      },
      py::arg("job"), py::arg("plans"), py::arg("machines"),
      py::call_guard<py::gil_scoped_release>());
  // A job's plans, one per rank (io/plan_io.hpp): a job plan file, or a plan file for every rank.
  m.def(
      "read_job_plans",
      [](const std::filesystem::path& path, const JobPtr& job) {
        return sim::read_job_plans(path, *job);
      },
      py::arg("path"), py::arg("job"));
  m.def(
      "write_job_plan",
      [](const std::vector<sim::Plan>& plans, const JobPtr& job) {
        return sim::write_job_plan(plans, *job);
      },
      py::arg("plans"), py::arg("job"));
}

void bind_job_studies(py::module_& m) {
  py::class_<JobComparison>(m, "JobComparison")
      .def("json",
           [](const JobComparison& c) {
             return search::job_comparison_json(c.comparison, *c.job, c.machines).dump();
           })
      .def("text",
           [](const JobComparison& c) {
             return search::job_comparison_text(c.comparison, *c.job, c.machines);
           })
      .def("csv",
           [](const JobComparison& c) { return search::job_comparison_csv(c.comparison, *c.job); });
  m.def("compare_job", &compare_job, py::arg("job"), py::arg("machines"), py::arg("encode"),
        py::arg("source"), py::call_guard<py::gil_scoped_release>());

  py::class_<JobSearchOutcome>(m, "JobSearchOutcome")
      .def("json",
           [](const JobSearchOutcome& o) {
             return search::job_search_json(o.result, *o.job, o.machines).dump();
           })
      .def("text",
           [](const JobSearchOutcome& o) {
             return search::job_search_text(o.result, *o.job, o.machines);
           })
      .def_property_readonly("plans", [](const JobSearchOutcome& o) { return o.result.plans(); })
      .def_property_readonly("searched",
                             [](const JobSearchOutcome& o) { return o.result.searched; })
      .def_property_readonly("simulation",
                             [](const JobSearchOutcome& o) {
                               return JobSimulation{o.job, o.machines, o.result.run};
                             })
      .def_readonly("cancelled", &JobSearchOutcome::cancelled);
  m.def("search_job", &search_job, py::arg("job"), py::arg("machines"), py::arg("arguments"),
        py::arg("source"), py::arg("progress"));
}

}  // namespace

void bind_jobs(py::module_& m) {
  py::class_<sim::Job, JobPtr>(m, "Job")
      .def_property_readonly("world_size", &sim::Job::world_size)
      .def("__eq__", [](const sim::Job& a, const sim::Job& b) { return a == b; });
  m.def("job_ranks", &job_ranks, py::arg("job"));
  m.def(
      "read_job", [](const std::filesystem::path& p) { return share(sim::read_job(p)); },
      py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "parse_job",
      [](const std::string& text, const std::string& source) {
        return share(sim::parse_job(text, source));
      },
      py::arg("text"), py::arg("source"), py::call_guard<py::gil_scoped_release>());
  m.def("write_job", &sim::write_job, py::arg("job"));
  py::class_<requests::DataParallelRequest>(m, "DataParallelRequest")
      .def(py::init<>())
      .def_readwrite("data_parallel", &requests::DataParallelRequest::data_parallel)
      .def_readwrite("fsdp", &requests::DataParallelRequest::fsdp)
      .def_readwrite("fsdp_strategy", &requests::DataParallelRequest::fsdp_strategy)
      .def_readwrite("fsdp_prefetch", &requests::DataParallelRequest::fsdp_prefetch)
      .def_readwrite("interconnect", &requests::DataParallelRequest::interconnect)
      .def_readwrite("network", &requests::DataParallelRequest::network)
      .def_readwrite("gpus_per_node", &requests::DataParallelRequest::gpus_per_node);
  m.def("zoo_data_parallel_job", &zoo_data_parallel_job, py::arg("step"), py::arg("device"),
        py::arg("request"), py::call_guard<py::gil_scoped_release>());
  m.def("import_kineto_job", &import_kineto_job, py::arg("inputs"), py::arg("step"),
        py::arg("ranks"), py::arg("snapshots"), py::arg("snapshot_device"),
        py::call_guard<py::gil_scoped_release>());
  bind_job_simulation(m);
  bind_job_studies(m);
}

}  // namespace memplan::python
