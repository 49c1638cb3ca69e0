// The layer vocabulary's aten table (core/aten_layers.hpp) for memplan.torch's capture: which
// layer an aten op call is, so that the capture (python/memplan/torch/recorder.py) and the Kineto
// importer read one table and name an op alike.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "core/aten_layers.hpp"
#include "python/src/bindings.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

// What the table's tests read of a Python argument: an object with a dim() method (a tensor) has
// that rank; a Python int or float (a bool too, as Python compares them) is a number; anything
// else is neither.
sim::AtenArgument describe(const py::handle& a) {
  sim::AtenArgument d;
  d.tensor = false;
  if (py::isinstance<py::int_>(a) || py::isinstance<py::float_>(a)) {
    d.number = a.cast<double>();
  } else if (py::hasattr(a, "dim")) {
    d.tensor = true;
    d.rank = a.attr("dim")().cast<std::size_t>();
  }
  return d;
}

std::optional<std::string> aten_layer(const std::string& aten, const py::sequence& arguments) {
  const sim::AtenLayer* row = sim::find_aten_layer(aten);
  if (row == nullptr) return std::nullopt;
  std::vector<sim::AtenArgument> described;
  if (row->test != sim::AtenTest::kName) {
    for (const py::handle a : arguments) described.push_back(describe(a));
  }
  const sim::Layer layer = sim::aten_layer(*row, described);
  if (layer == sim::Layer::kGeneric) return std::nullopt;
  return std::string(sim::rule_of(layer).name);
}

const char* test_name(sim::AtenTest test) {
  switch (test) {
    case sim::AtenTest::kName:
      return "name";
    case sim::AtenTest::kWeightRank:
      return "weight_rank";
    case sim::AtenTest::kReluSixBounds:
      return "relu6_bounds";
    case sim::AtenTest::kTensorOperands:
      return "tensor_operands";
  }
  return "name";
}

py::list aten_layer_rows() {
  py::list rows;
  for (const sim::AtenLayer& r : sim::aten_layers()) {
    py::dict row;
    row["aten"] = std::string(r.aten);
    row["layer"] = r.layer == sim::Layer::kGeneric
                       ? py::object(py::none())
                       : py::str(std::string(sim::rule_of(r.layer).name));
    row["test"] = test_name(r.test);
    row["argument"] = r.argument;
    row["backward"] = r.backward;
    rows.append(row);
  }
  return rows;
}

}  // namespace

void bind_layers(py::module_& m) {
  m.def("aten_layer", &aten_layer, py::arg("aten"), py::arg("arguments"),
        "The memplan layer of a call of aten operator `aten` (\"aten::convolution\") with its "
        "positional `arguments`, or None when memplan has no such layer (a generic op, which "
        "keeps its aten name). The table is core/aten_layers.hpp's, the Kineto importer's too: "
        "a convolution's layer is by its weight's rank, hardtanh is relu6 between 0 and 6, add "
        "a layer between two tensors.");
  m.def("aten_layers", &aten_layer_rows,
        "The aten table's rows: {aten, layer (None where the test decides), test, argument (the "
        "one the test reads, -1 for none), backward (the layer's backward op)}.");
}

}  // namespace memplan::python
