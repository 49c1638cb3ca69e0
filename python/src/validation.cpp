// validate: a plan run for real on the host backend against the simulator's prediction and the
// in-core run (runtime::validate), the report's fields as they are. And what a plan carried out
// elsewhere (memplan.torch) takes from the simulator rather than computing it again: each map's
// points in the step (where the lowering drops it, prefetches and releases it), the encodings'
// formats and sizes, where it brings a host-placed tensor to the device and lets it go, and the
// tolerance its results are held to.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "host_backend/host_backend.hpp"
#include "io/memory_snapshot_export.hpp"
#include "io/timeline_export.hpp"
#include "python/src/bindings.hpp"
#include "runtime/validation.hpp"
#include "sim/lowering.hpp"
#include "sim/simulation.hpp"

namespace py = pybind11;

namespace memplan::python {
namespace {

// As `memplan validate --backend host`: a backend's refusal (a layer it cannot run) is bad input.
// The report, the one-line diagnosis when the run ran out of memory, and the measured run's device
// memory as a PyTorch memory snapshot when it went to the end (`--snapshot-out`).
std::tuple<runtime::ValidationReport, std::optional<std::string>, std::optional<std::string>>
validate_on_host(const sim::Workload& workload, const sim::Plan& plan, const sim::Machine& machine,
                 std::uint64_t seed, bool calibrate) {
  const host_backend::HostBackend backend{};
  runtime::ValidationOptions options;
  options.seed = seed;
  options.calibrate = calibrate;
  const sim::Simulation predicted = sim::simulate_plan(workload, plan, machine);  // lowered once
  runtime::ValidationReport report;
  try {
    report = runtime::validate(backend, workload, plan, predicted, machine, options);
  } catch (const sim::InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw sim::InputError("--backend host", e.what());
  }
  std::optional<std::string> oom;
  if (report.oom) oom = sim::oom_to_text(*report.oom, predicted.program, workload);
  std::optional<std::string> snapshot;
  if (report.measured_feasible) {
    snapshot = sim::memory_snapshot_pickle(report.measured, predicted.program, workload, machine);
  }
  return {report, std::move(oom), std::move(snapshot)};
}

// One feature map's decision and the ops where the lowering acts on it (core/plan.hpp).
struct MapPoints {
  std::int32_t tensor = -1;
  std::string action;  // "keep", "swap", "recompute", "encode:fp16", ...
  bool per_use = false;
  std::int32_t last_forward_use = -1;  // sim::last_forward_use: after it, a map not kept goes
  std::optional<std::int32_t> prefetch_before;  // swap: the plan's point, else the default one
  std::optional<std::int32_t> release_before;   // swap: Note [Release point]; None: no delay
};

std::vector<MapPoints> map_points(const sim::Plan& plan, const sim::Workload& workload) {
  const std::vector<sim::FeatureMap> maps = sim::find_feature_maps(workload);
  std::vector<MapPoints> points;
  points.reserve(plan.decisions.size());
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {  // one per map, in the same order
    const sim::Decision& d = plan.decisions[i];
    MapPoints p;
    p.tensor = sim::value(d.tensor);
    p.action = sim::action_label(d.action, d.encoding);
    p.per_use = d.per_use;
    p.last_forward_use = sim::value(sim::last_forward_use(maps[i], workload));
    if (d.action == sim::Action::kSwap) {
      p.prefetch_before = sim::value(d.prefetch_before != sim::kNoOp
                                         ? d.prefetch_before
                                         : sim::default_prefetch_point(maps[i], workload));
      if (d.release_before != sim::kNoOp) p.release_before = sim::value(d.release_before);
    }
    points.push_back(std::move(p));
  }
  return points;
}

// Per copy a recomputation makes that no run reads (sim::regenerated_frees): (tensor, op re-run,
// its occurrence), in the order the lowering frees them.
std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t>> regenerated_frees(
    const sim::Plan& plan, const sim::Workload& workload) {
  std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t>> out;
  for (const sim::RegeneratedFree& f : sim::regenerated_frees(workload, sim::lower(workload, plan)))
    out.emplace_back(sim::value(f.tensor), sim::value(f.rerun), f.occurrence);
  return out;
}

// One group of uses of a host-placed tensor that gets its own device copy (sim::HostUseGroup),
// with the op before which the lowering prefetches it.
struct HostGroupPoints {
  std::int32_t first_use = -1;
  std::int32_t last_use = -1;           // the device copy goes after it (a pre-existing tensor's)
  std::int32_t earliest_prefetch = -1;  // the group's window: earliest_prefetch .. first_use
  std::int32_t default_prefetch = -1;
  std::int32_t prefetch_before = -1;  // the plan's point (Plan::host_prefetches), else the default
};

// A host-placed tensor's points in the step (Note [Host placement] in core/plan.hpp).
struct HostPoints {
  std::int32_t tensor = -1;
  std::optional<std::int32_t> gradient_drop;  // a gradient: sim::host_gradient_drop
  std::vector<HostGroupPoints> groups;        // sim::host_use_groups, ascending
};

// Per host-placed tensor of `plan`, ascending, what Lowerer::plan_host_placement (sim/lowering.cpp)
// lowers it with: its drop point when it is not pre-existing, and its groups of uses with the
// plan's prefetch point or the default one.
std::vector<HostPoints> host_points(const sim::Plan& plan, const sim::Workload& workload) {
  // The ops that read each host-placed tensor, ascending, with repeats (the lowering's readers).
  std::vector<std::int32_t> placed(workload.tensors.size(), -1);
  for (std::size_t k = 0; k < plan.host_tensors.size(); ++k)
    placed[sim::index(plan.host_tensors[k])] = static_cast<std::int32_t>(k);
  std::vector<std::vector<sim::OpId>> readers(plan.host_tensors.size());
  for (const sim::Op& op : workload.ops) {
    for (const sim::TensorId x : op.inputs) {
      const std::int32_t k = placed[sim::index(x)];
      if (k >= 0) readers[static_cast<std::size_t>(k)].push_back(op.id);
    }
  }
  std::vector<HostPoints> points;
  points.reserve(plan.host_tensors.size());
  std::vector<sim::HostUseGroup> groups;
  for (std::size_t k = 0; k < plan.host_tensors.size(); ++k) {
    const sim::TensorId t = plan.host_tensors[k];
    HostPoints p;
    p.tensor = sim::value(t);
    if (!sim::is_preexisting(workload.tensor(t).kind))
      p.gradient_drop = sim::value(sim::host_gradient_drop(t, readers[k], workload));
    sim::host_use_groups(t, readers[k], plan.host_update, workload, groups);
    for (const sim::HostUseGroup& g : groups) {
      p.groups.push_back({sim::value(g.first_use), sim::value(g.last_use),
                          sim::value(g.earliest_prefetch), sim::value(g.default_prefetch),
                          sim::value(sim::host_prefetch_point(plan, t, g))});
    }
    points.push_back(std::move(p));
  }
  return points;
}

// The encoding `scheme` names (binarize, sparse, fp16, fp10, fp8). Throws InputError.
sim::Encoding encoding_named(const std::string& scheme) {
  const auto parsed = sim::parse_action("encode:" + scheme);
  if (!parsed || parsed->first != sim::Action::kEncode) {
    throw sim::InputError("encoding",
                          "'" + scheme + "' is not binarize, sparse, fp16, fp10 or fp8");
  }
  return parsed->second;
}

// sim::encoded_bytes of a float32 map of `values` values.
sim::Bytes encoded_bytes(const std::string& scheme, std::int64_t values) {
  sim::Tensor map;
  map.bytes = values * 4;
  map.dtype = "float32";
  return sim::encoded_bytes(encoding_named(scheme), map);
}

// (exponent bits, mantissa bits) of fp16, fp10, fp8; None for binarize and sparse.
std::optional<std::pair<int, int>> narrow_format(const std::string& scheme) {
  const auto format = sim::narrow_format(encoding_named(scheme));
  if (!format) return std::nullopt;
  return std::pair{format->exponent_bits, format->mantissa_bits};
}

}  // namespace

void bind_validation(py::module_& m) {
  using R = runtime::ValidationReport;
  py::class_<runtime::Tolerance>(m, "Tolerance")
      .def_readonly("bitwise", &runtime::Tolerance::bitwise)
      .def_readonly("relative", &runtime::Tolerance::relative)
      .def_readonly("narrowed_maps", &runtime::Tolerance::narrowed_maps)
      .def_readonly("unit_roundoff", &runtime::Tolerance::unit_roundoff);
  py::class_<R>(m, "ValidationReport")
      .def_readonly("predicted_feasible", &R::predicted_feasible)
      .def_readonly("measured_feasible", &R::measured_feasible)
      .def_readonly("peak_bytes_predicted", &R::peak_bytes_predicted)
      .def_readonly("peak_bytes_measured", &R::peak_bytes_measured)
      .def_readonly("peak_reserved_predicted", &R::peak_reserved_predicted)
      .def_readonly("peak_reserved_measured", &R::peak_reserved_measured)
      .def_readonly("iteration_ns_predicted", &R::iteration_ns_predicted)
      .def_readonly("iteration_ns_measured", &R::iteration_ns_measured)
      .def_readonly("gradients_match", &R::gradients_match)
      .def_readonly("bitwise_equal", &R::bitwise_equal)
      .def_readonly("tolerance", &R::tolerance)
      .def_readonly("max_abs_diff", &R::max_abs_diff)
      .def_readonly("max_rel_diff", &R::max_rel_diff)
      .def_readonly("max_tensor_rel_diff", &R::max_tensor_rel_diff)
      .def_readonly("tensors_compared", &R::tensors_compared)
      .def_readonly("spilled_bytes", &R::spilled_bytes)
      .def_readonly("calibrated", &R::calibrated)
      .def("iteration_error_percent", &R::iteration_error_percent)
      .def("peaks_match", &R::peaks_match)
      .def("failures", [](const R& r) { return runtime::validation_failures(r); });
  m.def(
      "validate_on_host",
      [](const sim::Workload& workload, const sim::Plan& plan, const sim::Machine& machine,
         std::uint64_t seed, bool calibrate) {
        auto result = [&] {
          py::gil_scoped_release release;
          return validate_on_host(workload, plan, machine, seed, calibrate);
        }();
        auto& [report, oom, snapshot] = result;
        // The snapshot is a pickle: bytes, not text.
        std::optional<py::bytes> bytes;
        if (snapshot) bytes = py::bytes(*snapshot);
        return py::make_tuple(report, oom, bytes);
      },
      py::arg("workload"), py::arg("plan"), py::arg("machine"), py::arg("seed"),
      py::arg("calibrate"));
  m.attr("TOLERANCE_FACTOR") = runtime::kToleranceFactor;
  m.attr("MAX_RELATIVE_TOLERANCE") = runtime::kMaxRelativeTolerance;
  m.def("tolerance_for", &runtime::tolerance_for, py::arg("plan"));

  py::class_<MapPoints>(m, "MapPoints")
      .def_readonly("tensor", &MapPoints::tensor)
      .def_readonly("action", &MapPoints::action)
      .def_readonly("per_use", &MapPoints::per_use)
      .def_readonly("last_forward_use", &MapPoints::last_forward_use)
      .def_readonly("prefetch_before", &MapPoints::prefetch_before)
      .def_readonly("release_before", &MapPoints::release_before);
  m.def("map_points", &map_points, py::arg("plan"), py::arg("workload"));
  py::class_<HostGroupPoints>(m, "HostGroupPoints")
      .def_readonly("first_use", &HostGroupPoints::first_use)
      .def_readonly("last_use", &HostGroupPoints::last_use)
      .def_readonly("earliest_prefetch", &HostGroupPoints::earliest_prefetch)
      .def_readonly("default_prefetch", &HostGroupPoints::default_prefetch)
      .def_readonly("prefetch_before", &HostGroupPoints::prefetch_before);
  py::class_<HostPoints>(m, "HostPoints")
      .def_readonly("tensor", &HostPoints::tensor)
      .def_readonly("gradient_drop", &HostPoints::gradient_drop)
      .def_readonly("groups", &HostPoints::groups);
  m.def("host_points", &host_points, py::arg("plan"), py::arg("workload"));
  m.def("regenerated_frees", &regenerated_frees, py::arg("plan"), py::arg("workload"));
  m.def("encoded_bytes", &encoded_bytes, py::arg("scheme"), py::arg("values"));
  m.def("narrow_format", &narrow_format, py::arg("scheme"));
  m.attr("SPARSE_BLOCK_VALUES") = sim::kSparseBlockValues;
}

}  // namespace memplan::python
