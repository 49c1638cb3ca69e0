// Workloads: trace files (read, parse, write), the zoo's models, Kineto imports, `info`.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "importers/kineto_importer.hpp"
#include "importers/kineto_trace.hpp"
#include "python/src/bindings.hpp"
#include "sim/trace_io.hpp"
#include "sim/workload_summary.hpp"
#include "zoo/zoo.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

WorkloadPtr share(sim::Workload&& workload) {
  return std::make_shared<sim::Workload>(std::move(workload));
}

WorkloadPtr zoo_workload(const std::string& model, const std::string& device, std::int64_t batch,
                         const std::vector<std::int64_t>& input, std::optional<std::int64_t> depth,
                         const zoo::TransformerOptions& transformer, const std::string& optimizer) {
  zoo::ZooRequest request;
  request.model = model;
  request.device = device;
  request.options.batch = batch;
  request.options.input = input;
  request.options.depth = depth;
  request.options.transformer = transformer;
  request.options.optimizer = zoo::optimizer_named(optimizer);
  return share(zoo::make_workload(request));
}

WorkloadPtr import_kineto(const std::filesystem::path& path, std::optional<std::int64_t> step) {
  const importers::KinetoTrace trace = importers::read_kineto_trace(path.string());
  importers::ImportOptions options;
  if (step) options.step = *step;
  return share(importers::import_kineto(trace, options, path.filename().string()).workload);
}

}  // namespace

void bind_traces(py::module_& m) {
  py::class_<sim::Workload, std::shared_ptr<sim::Workload>>(m, "Workload")
      .def_property_readonly("op_count", [](const sim::Workload& w) { return w.ops.size(); })
      .def_property_readonly("tensor_count",
                             [](const sim::Workload& w) { return w.tensors.size(); })
      .def_property_readonly("device", [](const sim::Workload& w) { return w.device.name; })
      .def_property_readonly("device_memory_bytes",
                             [](const sim::Workload& w) { return w.device.memory_bytes; })
      .def("__eq__", [](const sim::Workload& a, const sim::Workload& b) { return a == b; });

  m.def(
      "read_trace", [](const std::filesystem::path& p) { return share(sim::read_trace(p)); },
      py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "parse_trace",
      [](const std::string& text, const std::string& source) {
        return share(sim::parse_trace(text, source));
      },
      py::arg("text"), py::arg("source"), py::call_guard<py::gil_scoped_release>());
  m.def("write_trace", &sim::write_trace, py::arg("workload"));
  m.def("write_trace_file", &sim::write_trace_file, py::arg("workload"), py::arg("path"));
  m.def(
      "info_json", [](const sim::Workload& w) { return sim::to_json(sim::summarize(w), w).dump(); },
      py::arg("workload"));
  m.def(
      "info_text", [](const sim::Workload& w) { return sim::to_text(sim::summarize(w), w); },
      py::arg("workload"));

  py::class_<zoo::TransformerOptions>(m, "TransformerOptions")
      .def(py::init<>())
      .def_readwrite("layers", &zoo::TransformerOptions::layers)
      .def_readwrite("hidden", &zoo::TransformerOptions::hidden)
      .def_readwrite("heads", &zoo::TransformerOptions::heads)
      .def_readwrite("sequence", &zoo::TransformerOptions::sequence)
      .def_readwrite("vocab", &zoo::TransformerOptions::vocab);
  m.def("zoo_workload", &zoo_workload, py::arg("model"), py::arg("device"), py::arg("batch"),
        py::arg("input"), py::arg("depth"), py::arg("transformer"), py::arg("optimizer") = "sgd",
        py::call_guard<py::gil_scoped_release>());
  m.def("zoo_list_text", &zoo::list_text);
  m.def("zoo_model_names", &zoo::model_names);
  m.def("zoo_device_names", &zoo::device_names);
  m.def("import_kineto", &import_kineto, py::arg("path"), py::arg("step"),
        py::call_guard<py::gil_scoped_release>());
}

}  // namespace memplan::python
