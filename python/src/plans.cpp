// Machines (the trace's device with what-if overrides), plans (files, named policies, encodings).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "core/input_error.hpp"
#include "core/machine.hpp"
#include "core/units.hpp"
#include "io/input_stream.hpp"
#include "io/output_file.hpp"
#include "io/plan_io.hpp"
#include "io/trace_io.hpp"
#include "python/src/bindings.hpp"
#include "requests/machine_request.hpp"
#include "search/policies/gist.hpp"
#include "search/policies/named_plan.hpp"
#include "search/policies/network_view.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

using Value = std::optional<requests::Quantity>;
using Text = std::optional<std::string>;

// The what-if keywords as requests/ takes them: text with its unit or a number in the base unit.
// The interconnect's: preset names and a count of GPUs per node (a Python int).
requests::MachineRequest machine_request(const Value& memory, const Text& link, const Value& h2d,
                                         const Value& d2h, const Value& latency,
                                         const Value& host_memory, const Value& host_bandwidth,
                                         const Text& allocator, const Text& alloc_conf,
                                         const Text& interconnect, const Text& network,
                                         const std::optional<std::int64_t>& gpus_per_node) {
  return {memory,         link,      h2d,        d2h,          latency, host_memory,
          host_bandwidth, allocator, alloc_conf, interconnect, network, gpus_per_node};
}

sim::Plan apply_encodings(const sim::Plan& plan, const sim::Workload& workload,
                          const std::string& encode) {
  const search::EncodingOptions options = search::parse_encoding_options(encode, "--encode");
  return search::apply_encodings(plan, search::NetworkView(workload), options);
}

// The input limits (io/input_stream.hpp): the CLI's --max-input-size and --max-input-values.
// Returns the limits before.
std::pair<std::uint64_t, std::uint64_t> set_input_limits(
    const std::optional<std::variant<std::int64_t, std::string>>& size,
    std::optional<std::int64_t> values) {
  const sim::InputLimits before = sim::input_limits();
  sim::InputLimits limits = before;
  if (size) {
    const std::int64_t bytes = std::holds_alternative<std::string>(*size)
                                   ? sim::parse_bytes(std::get<std::string>(*size), "size")
                                   : std::get<std::int64_t>(*size);
    if (bytes < 1) throw sim::InputError("size", "must be at least 1 byte");
    limits.bytes = static_cast<std::uint64_t>(bytes);
  }
  if (values) {
    if (*values < 1) throw sim::InputError("values", "must be at least 1");
    limits.values = static_cast<std::uint64_t>(*values);
  }
  sim::set_input_limits(limits);
  return std::make_pair(before.bytes, before.values);
}

}  // namespace

void bind_plans(py::module_& m) {
  py::class_<sim::Machine>(m, "Machine")
      .def_readonly("memory_bytes", &sim::Machine::memory_bytes)
      .def_property_readonly(
          "h2d_bytes_per_s",
          [](const sim::Machine& machine) { return machine.link.h2d_bytes_per_s; })
      .def_property_readonly(
          "d2h_bytes_per_s",
          [](const sim::Machine& machine) { return machine.link.d2h_bytes_per_s; })
      .def_property_readonly("copy_latency_ns",
                             [](const sim::Machine& machine) { return machine.link.latency_ns; })
      .def_readonly("host_memory_bytes", &sim::Machine::host_memory_bytes)
      .def_property_readonly("allocator",
                             [](const sim::Machine& machine) {
                               return std::string(sim::to_string(machine.allocator));
                             })
      .def_property_readonly(
          "alloc_conf",
          [](const sim::Machine& machine) { return sim::to_string(machine.allocator_config); })
      .def_property_readonly("interconnect", [](const sim::Machine& machine) {
        // The fabrics' names ("nvlink4 + ib-ndr"), or None: collectives keep their recorded time.
        return machine.interconnect ? std::optional<std::string>(machine.interconnect->name)
                                    : std::nullopt;
      });
  py::class_<requests::MachineRequest>(m, "MachineRequest")
      .def(py::init(&machine_request), py::arg("memory") = std::nullopt,
           py::arg("link") = std::nullopt, py::arg("h2d") = std::nullopt,
           py::arg("d2h") = std::nullopt, py::arg("latency") = std::nullopt,
           py::arg("host_memory") = std::nullopt, py::arg("host_bandwidth") = std::nullopt,
           py::arg("allocator") = std::nullopt, py::arg("alloc_conf") = std::nullopt,
           py::arg("interconnect") = std::nullopt, py::arg("network") = std::nullopt,
           py::arg("gpus_per_node") = std::nullopt);
  m.def("make_machine", &requests::make_machine, py::arg("workload"), py::arg("request"));
  // Each rank's machine (a job's ranks are asked about alike).
  m.def("make_machines", &requests::make_machines, py::arg("job"), py::arg("request"));

  py::class_<sim::Plan>(m, "Plan")
      .def_readonly("policy", &sim::Plan::policy)
      .def("__eq__", [](const sim::Plan& a, const sim::Plan& b) { return a == b; });
  m.def("read_plan", &sim::read_plan, py::arg("path"), py::arg("workload"));
  m.def(
      "parse_plan",
      [](const std::string& text, const std::string& source, const sim::Workload& w) {
        return sim::parse_plan(text, source, w);
      },
      py::arg("text"), py::arg("source"), py::arg("workload"));
  m.def("write_plan", &sim::write_plan, py::arg("plan"), py::arg("workload"));
  // The CLI's output files (io/output_file.hpp): checked before the work, written after it.
  m.def(
      "check_output",
      [](const std::string& path, const std::string& flag) {
        sim::check_outputs({{path, flag}});
      },
      py::arg("path"), py::arg("flag"));
  m.def(
      "write_output",
      [](const std::string& path, const std::string& text) { sim::write_output(path, text); },
      py::arg("path"), py::arg("text"));
  m.def("set_input_limits", &set_input_limits, py::arg("size") = py::none(),
        py::arg("values") = py::none());
  m.def("named_plan", &search::named_plan, py::arg("name"), py::arg("workload"), py::arg("machine"),
        py::call_guard<py::gil_scoped_release>());
  m.def("named_plan_names", &search::named_plan_names);
  m.def("apply_encodings", &apply_encodings, py::arg("plan"), py::arg("workload"),
        py::arg("encode"));
}

}  // namespace memplan::python
