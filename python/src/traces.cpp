// Workloads: trace files (read, parse, write), the zoo's models, Kineto imports, `info`, memory
// snapshots (what `memplan import snapshot` says of one), and the
// structure the simulator sees in a workload (its fingerprint, feature maps, buffers and last
// uses), which memplan.torch asks for instead of computing it again.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "core/feature_maps.hpp"
#include "core/liveness.hpp"
#include "core/plan.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/snapshot/snapshot_allocations.hpp"
#include "importers/snapshot/snapshot_report.hpp"
#include "io/trace_io.hpp"
#include "io/workload_summary.hpp"
#include "python/src/bindings.hpp"
#include "zoo/saved_activations.hpp"
#include "zoo/zoo.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

WorkloadPtr share(sim::Workload&& workload) {
  return std::make_shared<sim::Workload>(std::move(workload));
}

WorkloadPtr zoo_workload(const std::string& model, const std::string& device, std::int64_t batch,
                         const std::vector<std::int64_t>& input, std::optional<std::int64_t> depth,
                         const zoo::TransformerOptions& transformer, const std::string& optimizer,
                         const std::string& precision, const std::optional<std::string>& attention,
                         const std::optional<std::string>& activation, bool channels_last) {
  zoo::ZooRequest request;
  request.model = model;
  request.device = device;
  request.options.batch = batch;
  request.options.input = input;
  request.options.depth = depth;
  request.options.transformer = transformer;
  request.options.optimizer = zoo::optimizer_named(optimizer);
  request.options.precision = zoo::precision_named(precision);
  if (attention) request.options.attention = zoo::attention_named(*attention);
  if (activation) request.options.activation = zoo::activation_named(*activation);
  request.options.channels_last = channels_last;
  return share(zoo::make_workload(request));
}

WorkloadPtr import_kineto(const std::filesystem::path& path, std::optional<std::int64_t> step,
                          const std::optional<std::filesystem::path>& snapshot,
                          std::optional<std::int64_t> snapshot_device) {
  const importers::KinetoTrace trace = importers::read_kineto_trace(path.string());
  importers::ImportOptions options;
  if (step) options.step = *step;
  std::vector<importers::AllocationHistory> allocations =
      importers::read_snapshot_allocation_histories(
          snapshot ? std::vector<std::filesystem::path>{*snapshot}
                   : std::vector<std::filesystem::path>(),
          snapshot_device, importers::time_zeros({trace}));
  if (!allocations.empty()) options.allocations = std::move(allocations.front());
  return share(importers::import_kineto(trace, options, path.filename().string()).workload);
}

// Ids as Python sees them: ints, None for none.
std::optional<std::int32_t> op_or_none(sim::OpId op) {
  if (op == sim::kNoOp) return std::nullopt;
  return sim::value(op);
}

std::vector<std::int32_t> feature_map_ids(const sim::Workload& w) {
  std::vector<std::int32_t> ids;
  for (const sim::FeatureMap& map : sim::find_feature_maps(w)) {
    ids.push_back(sim::value(map.tensor));
  }
  return ids;
}

// Per tensor: the tensor that allocates its buffer (the root of its in_place_of chain).
std::vector<std::int32_t> storage_roots(const sim::Workload& w) {
  const sim::Liveness liveness = sim::analyze_liveness(w);
  std::vector<std::int32_t> roots;
  roots.reserve(liveness.storage_of.size());
  for (const std::size_t s : liveness.storage_of) {
    roots.push_back(sim::value(liveness.storages[s].root));
  }
  return roots;
}

// Per tensor: the last op that reads it (None when none does).
std::vector<std::optional<std::int32_t>> last_uses(const sim::Workload& w) {
  const sim::Liveness liveness = sim::analyze_liveness(w);
  std::vector<std::optional<std::int32_t>> last;
  last.reserve(liveness.last_use.size());
  for (const sim::OpId op : liveness.last_use) last.push_back(op_or_none(op));
  return last;
}

// The ops that end a backward node (sim::ends_backward_node), ascending.
std::vector<std::int32_t> backward_node_ends(const sim::Workload& w) {
  std::vector<std::int32_t> ends;
  for (const sim::Op& op : w.ops) {
    if (sim::ends_backward_node(w, op.id)) ends.push_back(sim::value(op.id));
  }
  return ends;
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
      // The step's place in a job (trace format v3 `distributed`): None for a single-GPU step.
      .def_property_readonly("rank",
                             [](const sim::Workload& w) -> std::optional<std::int32_t> {
                               if (!w.distributed) return std::nullopt;
                               return w.distributed->rank;
                             })
      .def_property_readonly("world_size",
                             [](const sim::Workload& w) -> std::int32_t {
                               return w.distributed ? w.distributed->world_size : 1;
                             })
      .def_property_readonly("backend",
                             [](const sim::Workload& w) -> std::optional<std::string> {
                               if (!w.distributed || w.distributed->backend.empty())
                                 return std::nullopt;
                               return w.distributed->backend;
                             })
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
  m.def(
      "info_json", [](const sim::Workload& w) { return sim::to_json(sim::summarize(w), w).dump(); },
      py::arg("workload"));
  m.def(
      "info_text", [](const sim::Workload& w) { return sim::to_text(sim::summarize(w), w); },
      py::arg("workload"));
  m.def(
      "import_snapshot",
      [](const std::string& path, const std::string& trace) {
        const importers::SnapshotReport report = importers::report_snapshot(path, trace);
        return std::pair{importers::snapshot_json(report).dump(), importers::snapshot_text(report)};
      },
      py::arg("path"), py::arg("trace") = std::string(), py::call_guard<py::gil_scoped_release>());
  m.def(
      "workload_fingerprint",
      [](const sim::Workload& w) { return fmt::format("{:016x}", sim::workload_fingerprint(w)); },
      py::arg("workload"));
  m.def("feature_maps", &feature_map_ids, py::arg("workload"));
  m.def("storage_roots", &storage_roots, py::arg("workload"));
  m.def("last_uses", &last_uses, py::arg("workload"));
  m.def("backward_node_ends", &backward_node_ends, py::arg("workload"));
  m.def("saved_activation_bytes", &zoo::saved_activation_bytes, py::arg("workload"));

  py::class_<zoo::TransformerOptions>(m, "TransformerOptions")
      .def(py::init<>())
      .def_readwrite("layers", &zoo::TransformerOptions::layers)
      .def_readwrite("hidden", &zoo::TransformerOptions::hidden)
      .def_readwrite("heads", &zoo::TransformerOptions::heads)
      .def_readwrite("sequence", &zoo::TransformerOptions::sequence)
      .def_readwrite("vocab", &zoo::TransformerOptions::vocab)
      .def_readwrite("intermediate", &zoo::TransformerOptions::intermediate)
      .def_readwrite("kv_heads", &zoo::TransformerOptions::kv_heads);
  m.def("zoo_workload", &zoo_workload, py::arg("model"), py::arg("device"), py::arg("batch"),
        py::arg("input"), py::arg("depth"), py::arg("transformer"), py::arg("optimizer") = "sgd",
        py::arg("precision") = "fp32", py::arg("attention") = std::nullopt,
        py::arg("activation") = std::nullopt, py::arg("channels_last") = false,
        py::call_guard<py::gil_scoped_release>());
  m.def("zoo_list_text", &zoo::list_text);
  m.def("zoo_model_names", &zoo::model_names);
  m.def("zoo_device_names", &zoo::device_names);
  m.def("import_kineto", &import_kineto, py::arg("path"), py::arg("step"), py::arg("snapshot"),
        py::arg("snapshot_device"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace memplan::python
