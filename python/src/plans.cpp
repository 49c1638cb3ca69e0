// Machines (the trace's device with what-if overrides), plans (files, named policies, encodings).
#include <filesystem>
#include <optional>
#include <string>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "python/src/bindings.hpp"
#include "search/gist.hpp"
#include "search/named_plan.hpp"
#include "search/network_view.hpp"
#include "sim/input_error.hpp"
#include "sim/machine.hpp"
#include "sim/plan_io.hpp"
#include "sim/trace_io.hpp"
#include "sim/units.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

using Text = std::optional<std::string>;

// The overrides as the CLI's what-if flags give them (same units, same names in errors).
sim::Machine make_machine(const sim::Workload& workload, const Text& memory, const Text& link,
                          const Text& h2d, const Text& d2h, const Text& latency,
                          const Text& host_memory, const Text& allocator) {
  sim::MachineOverrides o;
  if (memory) o.memory_bytes = sim::parse_bytes(*memory, "--memory");
  if (link) o.link_name = *link;
  if (h2d) o.link.h2d_bytes_per_s = sim::parse_bandwidth(*h2d, "--h2d");
  if (d2h) o.link.d2h_bytes_per_s = sim::parse_bandwidth(*d2h, "--d2h");
  if (latency) o.link.latency_ns = sim::parse_duration(*latency, "--latency");
  if (host_memory) o.host_memory_bytes = sim::parse_bytes(*host_memory, "--host-memory");
  if (allocator) {
    o.allocator = sim::parse_allocator_model(*allocator);
    if (!o.allocator) {
      throw sim::InputError("--allocator",
                            "'" + *allocator + "' is not an allocator: arena or caching");
    }
  }
  return sim::make_machine(workload.device, o);
}

sim::Plan apply_encodings(const sim::Plan& plan, const sim::Workload& workload,
                          const std::string& encode) {
  const search::EncodingOptions options = search::parse_encoding_options(encode, "--encode");
  return search::apply_encodings(plan, search::NetworkView(workload), options);
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
      .def_property_readonly("allocator", [](const sim::Machine& machine) {
        return std::string(sim::to_string(machine.allocator));
      });
  m.def("make_machine", &make_machine, py::arg("workload"), py::arg("memory"), py::arg("link"),
        py::arg("h2d"), py::arg("d2h"), py::arg("latency"), py::arg("host_memory"),
        py::arg("allocator") = std::nullopt);

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
  m.def(
      "write_file_atomically",
      [](const std::filesystem::path& path, const std::string& text) {
        sim::write_file_atomically(path, text);
      },
      py::arg("path"), py::arg("text"));
  m.def("named_plan", &search::named_plan, py::arg("name"), py::arg("workload"), py::arg("machine"),
        py::call_guard<py::gil_scoped_release>());
  m.def("named_plan_names", &search::named_plan_names);
  m.def("apply_encodings", &apply_encodings, py::arg("plan"), py::arg("workload"),
        py::arg("encode"));
}

}  // namespace memplan::python
