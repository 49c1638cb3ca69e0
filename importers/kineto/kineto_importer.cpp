// import_kineto: the stages of an import, in order. Each stage has its file: step_selection.cpp
// (which events are the step), step_units.cpp (the step's units and their device time and
// workspace), unit_roles.cpp (what each unit is; a forward op's layer from core/aten_layers.hpp),
// then StepBuilder (step_builder.hpp: the workload, its checks and its host side).
#include "importers/kineto/kineto_importer.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "importers/kineto/memory_timeline.hpp"
#include "importers/kineto/step_builder.hpp"
#include "importers/kineto/step_events.hpp"
#include "importers/kineto/step_selection.hpp"
#include "importers/kineto/step_units.hpp"
#include "importers/kineto/unit_roles.hpp"

namespace memplan::importers {

namespace {

// Where the workload came from and how its figures were made.
void describe(const KinetoTrace& trace, const ImportReport& report, const std::string& file_label,
              const std::string& link, sim::Workload& workload) {
  workload.provenance.source = "imported";
  workload.provenance.file = file_label;
  if (report.step.number >= 0) workload.provenance.step = report.step.number;
  workload.provenance.note = fmt::format(
      "PyTorch profiler ({} format) {}; layer-level dataflow reconstructed from "
      "program order, shapes and autograd sequence numbers (docs/kineto-import.md); {}{}{}",
      trace.format == KinetoFormat::k2021 ? "2021" : "current", report.step.label,
      report.gpu ? "op durations are the device time of the kernels each op launched"
                 : "CPU-only trace: op durations are CPU times",
      link.empty() ? "" : "; ", link);
  workload.device.name =
      report.gpu ? (trace.device_name.empty() ? "cuda" : trace.device_name) : "cpu";
  workload.device.memory_bytes = report.gpu ? trace.device_memory : 0;
  // The step's memory came from PyTorch's caching allocator (memory/caching_allocator.hpp).
  workload.device.allocator = sim::AllocatorModel::kCaching;
}

// No unit records a shape: the step was recorded without record_shapes.
bool time_only(const KinetoTrace& trace, const std::vector<detail::Unit>& units) {
  return std::none_of(units.begin(), units.end(), [&](const detail::Unit& u) {
    const auto& d = trace.cpu_events[u.event].input_dims;
    return std::any_of(d.begin(), d.end(), [](const detail::Shape& s) { return !s.empty(); });
  });
}

}  // namespace

ImportResult import_kineto(const KinetoTrace& trace, const ImportOptions& options,
                           const std::string& file_label) {
  ImportReport report;
  report.gpu = std::any_of(trace.gpu_events.begin(), trace.gpu_events.end(),
                           [](const GpuEvent& g) { return g.kind != GpuKind::kMemcpy; });
  const detail::Nesting nesting = detail::nest(trace.cpu_events);
  const detail::ChosenStep chosen = detail::choose_step(trace, options, report.gpu);
  report.step = chosen.step;
  report.step_was_chosen = chosen.chosen;
  report.step_reason = chosen.reason;
  std::vector<detail::Unit> units = detail::collect_units(trace, nesting, report.step);
  const detail::StepStreams streams =
      detail::attribute_device_time(trace, report.step, report.gpu, units);
  detail::measure_workspace(trace, report.gpu, units);
  report.time_only = time_only(trace, units);
  const detail::StepRoles roles = detail::classify_units(trace, nesting, report.time_only, units);
  report.persistent_grads = roles.persistent_grads;
  report.leaf_nodes = roles.leaf_nodes;
  report.optimizer_states_per_parameter = static_cast<int>(roles.state_names.size());

  detail::StepBuilder builder(trace, nesting, units, roles, streams, report.time_only, report);
  builder.build();
  builder.check_parameters_against_optimizer();
  builder.check_outputs_against_allocations();
  builder.shard_for_fsdp();  // after the checks, which compare the unsharded parameters
  if (report.time_only) {
    std::optional<AllocationHistory> history =
        options.allocations ? options.allocations : trace_allocation_history(trace);
    if (history && !builder.size_from_allocations(*history) && options.allocations) {
      throw sim::InputError(trace.source,
                            fmt::format("{} has no allocation of {} in its time span: not the "
                                        "same run",
                                        report.step.label, history->source));
    }
  } else if (options.allocations) {
    throw sim::InputError(trace.source,
                          fmt::format("{} has recorded shapes: its sizes come from them ({} gives "
                                      "sizes to a step recorded without shapes; `memplan import "
                                      "snapshot --trace` joins a snapshot with any trace)",
                                      report.step.label, options.allocations->source));
  }
  builder.order_streams(report.step);
  if (report.gpu) builder.fill_host_side(report.step);
  const std::string link = report.gpu ? builder.measure_device_link() : "";
  builder.plan_gathered_parameters();  // last: it removes ops and tensors
  sim::Workload& workload = builder.workload();
  describe(trace, report, file_label, link, workload);
  workload.distributed = trace.distributed;
  if (workload.distributed) workload.distributed->step_start_ns = report.step.start_ns;
  if (workload.distributed) workload.distributed->fsdp = report.fsdp_setting;
  sim::validate(workload, trace.source);
  for (const sim::Op& o : workload.ops) report.op_time_ns += o.duration_ns;  // each under an hour
  report.collective_transfer_ns = report.collective_recorded_ns;  // a single rank keeps its own
  return ImportResult{std::move(workload), report};
}

}  // namespace memplan::importers
