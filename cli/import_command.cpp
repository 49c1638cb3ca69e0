// `memplan import kineto FILE... | DIR -o TRACE`: PyTorch profiler traces turned into a memplan
// trace: one step of one GPU, or of every rank of a job that ran on several (a job file).
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/input_limit_flags.hpp"
#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "core/units.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_job.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/recorded_step.hpp"
#include "importers/snapshot/snapshot_allocations.hpp"
#include "io/output_file.hpp"
#include "io/trace_io.hpp"

namespace memplan::cli {

namespace {

struct Options {
  std::vector<std::string> files;
  std::vector<std::int32_t> ranks;
  std::int64_t step = -1;
  std::string step_annotation;
  std::string window;
  bool whole = false;
  std::string output;
  bool json = false;
  std::vector<std::string> snapshots;  // one per rank, in rank order
  std::int64_t snapshot_device = -1;
};

// One rank's import: its workload and report, with the trace it came from.
struct RankView {
  const sim::Workload& workload;
  const importers::ImportReport& report;
  const importers::KinetoTrace& trace;
};

// The rank, its streams, what orders them and its collectives, as text (nothing for a step of
// one GPU on one stream).
void print_streams_report(std::FILE* out, const RankView& v) {
  const auto& r = v.report;
  if (const auto& d = v.workload.distributed) {
    fmt::print(out, "rank {} of {}{}\n", d->rank, d->world_size,
               d->backend.empty() ? "" : fmt::format(" ({})", d->backend));
  }
  if (!v.workload.streams.empty()) {
    fmt::print(out,
               "streams: {} ({}); {} ops of work beside the compute stream; {} after edges from "
               "{} ({} waits recorded)\n",
               v.workload.streams.size(), fmt::join(v.workload.streams, ", "), r.side_stream_ops,
               r.after_edges, r.wait_rule, r.stream_waits);
  }
  if (r.collectives == 0) return;
  fmt::print(
      out, "collectives: {}, {}, recorded {:.3f} ms, transfer {:.3f} ms ({})\n", r.collectives,
      sim::format_bytes(r.collective_bytes), sim::to_milliseconds(r.collective_recorded_ns),
      sim::to_milliseconds(r.collective_transfer_ns),
      r.transfer_from_peers
          ? fmt::format("the least any rank of the group recorded; {:.3f} ms waiting for "
                        "the last peer",
                        sim::to_milliseconds(r.collective_recorded_ns - r.collective_transfer_ns))
          : std::string("a single rank keeps its recorded time: its peers are assumed "
                        "alike"));
}

// The parameters' cross-check, the time-only case and the host side, as text.
void print_host_report(std::FILE* out, const RankView& v, const importers::RecordedStep& recorded) {
  const auto& r = v.report;
  fmt::print(out, "trainable parameters: {} tensors, {} from the ops that read them",
             r.trainable_parameters, sim::format_bytes(r.trainable_parameter_bytes));
  if (r.optimizer_shape_tensors) {
    fmt::print(out, "; the optimizer's ops record {} tensors, {}{}\n", *r.optimizer_shape_tensors,
               sim::format_bytes(r.optimizer_shape_bytes),
               r.optimizer_shape_bytes == r.trainable_parameter_bytes ? " (equal)" : " (differ)");
  } else {
    fmt::print(out, " (the optimizer's ops record no tensor lists to check them against)\n");
  }
  if (r.leaf_nodes > 0) {
    fmt::print(
        out, "autograd accumulated {} leaf gradients{}, {}{}{}\n", r.leaf_tensors,
        r.leaf_tensors == r.leaf_nodes
            ? ""
            : fmt::format(" (of {} nodes; the rest without shapes)", r.leaf_nodes),
        sim::format_bytes(r.leaf_bytes),
        r.leaf_tensors != r.leaf_nodes ? ""
        : r.leaf_bytes == r.trainable_parameter_bytes && r.leaf_tensors == r.trainable_parameters
            ? " (equal)"
            : " (differ)",
        r.promoted_leaves == 0
            ? ""
            : fmt::format("; {} of them read by ops without a layer rule (an embedding, a "
                          "matmul) made parameters",
                          r.promoted_leaves));
  }
  if (r.time_only && !r.sizes_from.empty()) {
    fmt::print(out,
               "no recorded shapes: sizes from {}, {} allocations in the step made {} tensors "
               "whose lifetimes are known and whose readers are not (the in-core replay, memory "
               "timeline and allocator and link what-ifs follow them; no plan moves them); record "
               "with torch.profiler.profile(record_shapes=True) for a step memplan can plan\n",
               r.sizes_from, r.sized_allocations, v.workload.tensors.size());
  } else if (r.time_only) {
    fmt::print(out,
               "no recorded shapes: imported the time side alone (in-core replay and link what-ifs "
               "work; compare, search, sweep and validate refuse); record with "
               "torch.profiler.profile(record_shapes=True) for sizes, or give the run's memory "
               "snapshot (--snapshot)\n");
  }
  if (r.host_ops > 0) {
    fmt::print(out,
               "host side: {} ops with their dispatch time, {} blocking calls ({:.3f} ms waiting), "
               "launch {} ns, {} streams; {} copies in the step ({} pageable, H2D {}, D2H {})\n",
               r.host_ops, r.blocking_calls, static_cast<double>(r.blocked_ns) / 1e6,
               v.workload.launch_ns.value_or(0), r.streams, r.copies, r.pageable_copies,
               sim::format_bytes(r.h2d_bytes), sim::format_bytes(r.d2h_bytes));
  }
  if (r.allocations) {
    fmt::print(out,
               "memory events with addresses: {} allocations ({} made before the trace); {} of {} "
               "forward outputs match an allocation their op made\n",
               *r.allocations, r.allocations_before_trace, r.outputs_confirmed, r.outputs_checked);
  }
  if (!r.fsdp.empty()) {
    fmt::print(
        out,
        "{}: parameters sharded {} ways ({} of shards here), {} all-gathers in the trace, {} "
        "gradient reductions; {}\n",
        r.fsdp, r.fsdp_shards, sim::format_bytes(r.fsdp_shard_bytes), r.fsdp_gathers,
        r.fsdp_reductions,
        r.fsdp_setting
            ? fmt::format("{} units' gathered parameters as feature maps, the step's "
                          "setting {} with backward prefetch {} (its {} backward re-gathers "
                          "are the plan's re-runs)",
                          r.fsdp_units,
                          r.fsdp_setting->reshard_after_forward ? "FULL_SHARD" : "SHARD_GRAD_OP",
                          r.fsdp_setting->backward_prefetch, r.fsdp_regathers)
            : fmt::format("the gathered parameters not plannable: {}", r.fsdp_unplanned));
  }
  fmt::print(out, "recorded step wall {:.3f} ms, its device work ends at {:.3f} ms\n",
             static_cast<double>(r.step.end_ns - r.step.start_ns) / 1e6,
             static_cast<double>(recorded.span_ns) / 1e6);
}

// The JSON report of one rank: what was imported, against what the profiler recorded (time and
// peak).
nlohmann::json report_json(const RankView& v, const importers::RecordedStep& recorded,
                           sim::Bytes peak_bytes, sim::Bytes preexisting) {
  const auto& r = v.report;
  nlohmann::json j = {{"step", r.step.label},
                      {"step_number", r.step.number},
                      {"step_was_chosen", r.step_was_chosen},
                      {"step_reason", r.step_reason},
                      {"file", v.trace.source},
                      {"forward_ops", r.forward_ops},
                      {"backward_ops", r.backward_ops},
                      {"update_ops", r.update_ops},
                      {"tensors", v.workload.tensors.size()},
                      {"folded_events", r.folded_events},
                      {"unmatched_backward", r.unmatched_backward},
                      {"gpu", r.gpu},
                      {"op_time_s", sim::to_seconds(r.op_time_ns)},
                      {"recorded_busy_s", sim::to_seconds(recorded.device_busy_ns)},
                      {"recorded_device_time_s", sim::to_seconds(recorded.device_time_ns)},
                      {"peak_bytes_incore", peak_bytes}};
  j["recorded_peak_total_allocated_bytes"] =
      recorded.peak_total_allocated_bytes ? nlohmann::json(*recorded.peak_total_allocated_bytes)
                                          : nlohmann::json(nullptr);
  j["recorded_peak_above_start_bytes"] = recorded.peak_above_start_bytes;
  j["unrecorded_frees"] = recorded.unrecorded_frees;
  j["preexisting_bytes"] = preexisting;
  j["trainable_parameters"] = r.trainable_parameters;
  j["trainable_parameter_bytes"] = r.trainable_parameter_bytes;
  j["optimizer_shape_tensors"] =
      r.optimizer_shape_tensors ? nlohmann::json(*r.optimizer_shape_tensors) : nlohmann::json();
  j["optimizer_shape_bytes"] = r.optimizer_shape_bytes;
  j["accumulate_grad_nodes"] = r.leaf_nodes;
  j["leaf_tensors"] = r.leaf_tensors;
  j["leaf_bytes"] = r.leaf_bytes;
  j["promoted_leaves"] = r.promoted_leaves;
  j["time_only"] = r.time_only;
  if (!r.sizes_from.empty()) {
    j["sizes_from"] = r.sizes_from;
    j["sized_allocations"] = r.sized_allocations;
    j["allocations_peak_bytes"] = *r.allocations_peak_bytes;
  }
  j["host_ops"] = r.host_ops;
  j["blocking_calls"] = r.blocking_calls;
  j["blocked_s"] = sim::to_seconds(r.blocked_ns);
  j["launch_ns"] = v.workload.launch_ns ? nlohmann::json(*v.workload.launch_ns) : nlohmann::json();
  j["streams"] = r.streams;
  if (r.allocations) {
    j["allocations"] = *r.allocations;
    j["allocations_before_trace"] = r.allocations_before_trace;
    j["outputs_checked"] = r.outputs_checked;
    j["outputs_confirmed"] = r.outputs_confirmed;
  }
  if (!r.fsdp.empty()) {
    j["fsdp"] = r.fsdp;
    j["fsdp_shards"] = r.fsdp_shards;
    j["fsdp_shard_bytes"] = r.fsdp_shard_bytes;
    j["fsdp_gathers"] = r.fsdp_gathers;
    j["fsdp_reductions"] = r.fsdp_reductions;
    j["fsdp_units"] = r.fsdp_units;
    j["fsdp_regathers"] = r.fsdp_regathers;
    j["fsdp_unplanned"] = r.fsdp_unplanned;
  }
  j["copies"] = r.copies;
  j["pageable_copies"] = r.pageable_copies;
  j["h2d_bytes"] = r.h2d_bytes;
  j["d2h_bytes"] = r.d2h_bytes;
  j["recorded_wall_s"] = sim::to_seconds(r.step.end_ns - r.step.start_ns);
  j["recorded_device_end_s"] = sim::to_seconds(recorded.span_ns);
  return j;
}

// The rank's place in its job, its streams and collectives, as JSON.
void add_streams_json(const RankView& v, nlohmann::json& j) {
  const auto& r = v.report;
  if (const auto& d = v.workload.distributed) {
    j["rank"] = d->rank;
    j["world_size"] = d->world_size;
    j["backend"] = d->backend;
  }
  j["stream_labels"] = v.workload.streams;
  j["side_stream_ops"] = r.side_stream_ops;
  j["after_edges"] = r.after_edges;
  j["stream_waits"] = r.stream_waits;
  j["wait_rule"] = r.wait_rule;
  j["collectives"] = r.collectives;
  j["collective_bytes"] = r.collective_bytes;
  j["collective_recorded_s"] = sim::to_seconds(r.collective_recorded_ns);
  j["collective_transfer_s"] = sim::to_seconds(r.collective_transfer_ns);
  j["collective_wait_s"] = sim::to_seconds(r.collective_recorded_ns - r.collective_transfer_ns);
  j["transfer_from_peers"] = r.transfer_from_peers;
}

// The text report of one rank: what was imported, against what the profiler recorded.
void print_text_report(std::FILE* out, const RankView& v, const importers::RecordedStep& recorded,
                       sim::Bytes peak_bytes, sim::Bytes preexisting) {
  const auto& r = v.report;
  fmt::print(out, "imported {}{} from {}: {} forward, {} backward, {} update ops, {} tensors\n",
             r.step.label, r.step_was_chosen ? fmt::format(" ({})", r.step_reason) : "",
             v.trace.source, r.forward_ops, r.backward_ops, r.update_ops,
             v.workload.tensors.size());
  if (r.update_ops == 0 && r.backward_ops > 0) {
    fmt::print(out,
               "no Optimizer.step in this step: the optimizer did not run (a GradScaler skips it "
               "when the gradients overflow; choose another step with --step N)\n");
  }
  fmt::print(out,
             "folded into the previous op: {} non-layer events, {} of them backward nodes without "
             "a forward layer op\n",
             r.folded_events, r.unmatched_backward);
  print_streams_report(out, v);
  fmt::print(out, "{} time: in-core replay {:.3f} ms, recorded busy {:.3f} ms\n",
             r.gpu ? "device" : "CPU", sim::to_milliseconds(r.op_time_ns),
             sim::to_milliseconds(recorded.device_busy_ns));
  constexpr double kMiB = 1 << 20;
  if (r.allocations_peak_bytes) {
    fmt::print(out, "peak: in-core {:.1f} MiB, the allocations' own {:.1f} MiB\n",
               static_cast<double>(peak_bytes) / kMiB,
               static_cast<double>(*r.allocations_peak_bytes) / kMiB);
  } else if (recorded.peak_total_allocated_bytes) {
    fmt::print(out, "peak: in-core {:.1f} MiB, recorded Total Allocated {:.1f} MiB\n",
               static_cast<double>(peak_bytes) / kMiB,
               static_cast<double>(*recorded.peak_total_allocated_bytes) / kMiB);
  } else {
    fmt::print(out,
               "peak: in-core {:.1f} MiB, recorded {:.1f} MiB above the step's start + {:.1f} MiB "
               "of parameters and optimizer state from the model's shapes = {:.1f} MiB\n",
               static_cast<double>(peak_bytes) / kMiB,
               static_cast<double>(recorded.peak_above_start_bytes) / kMiB,
               static_cast<double>(preexisting) / kMiB,
               static_cast<double>(recorded.peak_above_start_bytes + preexisting) / kMiB);
  }
  if (recorded.unrecorded_frees > 0) {
    fmt::print(out,
               "the profiler recorded no free for {} allocations (freed on threads it does not "
               "watch; their addresses were allocated again)\n",
               recorded.unrecorded_frees);
  }
  print_host_report(out, v, recorded);
}

// One rank's report, as text or as a JSON object.
nlohmann::json rank_report(std::FILE* out, const RankView& v, bool json) {
  const auto& r = v.report;
  const auto recorded = importers::measure_recorded_step(v.trace, r.step, r.gpu);
  const auto peak = sim::incore_peak(v.workload);
  sim::Bytes preexisting = 0;
  for (const auto& t : v.workload.tensors) {
    if (sim::is_persistent(t.kind)) preexisting += t.bytes;
  }
  if (!json) {
    print_text_report(out, v, recorded, peak.bytes, preexisting);
    return {};
  }
  nlohmann::json j = report_json(v, recorded, peak.bytes, preexisting);
  add_streams_json(v, j);
  return j;
}

// What was imported, against what the profiler recorded (time and peak), per rank, as text or
// JSON (one object for one rank, as before; {"ranks": [...]} for a job).
void print_report(std::FILE* out, const importers::JobImportResult& result,
                  const std::vector<importers::KinetoTrace>& traces, const Options& o) {
  const std::size_t n = result.job.ranks.size();
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const RankView v{result.job.ranks[i], result.reports[i], traces[i]};
    if (!o.json && n > 1) {
      fmt::print(out, "{}== rank {} ({}) ==\n", i == 0 ? "" : "\n", v.workload.distributed->rank,
                 std::filesystem::path(v.trace.source).filename().string());
    }
    ranks.push_back(rank_report(out, v, o.json));
  }
  if (o.json) {
    nlohmann::json j = n == 1 ? ranks.front() : nlohmann::json{{"ranks", ranks}};
    j["output"] = o.output;
    fmt::print(out, "{}\n", j.dump(2));
    return;
  }
  fmt::print(out, "wrote {}{}\n", o.output,
             n > 1 ? fmt::format(" (a job of {} ranks)", n) : std::string());
}

importers::ImportOptions import_options(const Options& o) {
  importers::ImportOptions import_options;
  if (o.step >= 0) import_options.step = o.step;
  if (!o.step_annotation.empty()) import_options.step_annotation = o.step_annotation;
  if (!o.window.empty()) {
    const auto colon = o.window.find(':');
    if (colon == std::string::npos)
      throw sim::InputError("--window", "expected START:END, e.g. 10ms:86ms");
    import_options.window = {sim::parse_duration(o.window.substr(0, colon), "--window"),
                             sim::parse_duration(o.window.substr(colon + 1), "--window")};
  }
  import_options.whole_trace = o.whole;
  return import_options;
}

void add_kineto_command(CLI::App& cmd, const std::shared_ptr<Options>& options) {
  auto* kineto = cmd.add_subcommand(
      "kineto",
      "PyTorch profiler (Kineto) Chrome traces, .json or .json.gz: one file, the files of a job's "
      "ranks, a folder of them or a merged file (docs/kineto-import.md)");
  add_input_limit_flags(*kineto);
  kineto->add_option("FILE", options->files, "profiler traces, or a folder of them")->required();
  kineto
      ->add_option("--step", options->step,
                   "the N of ProfilerStep#N, on every rank (default: the median complete step)")
      ->check(integer_in(0, std::numeric_limits<std::int64_t>::max()));
  kineto->add_option("--rank", options->ranks,
                     "the global rank of each trace, in the order read, for files that record "
                     "none (no distributedInfo)");
  kineto
      ->add_option("-o,--output", options->output, "memplan trace to write (- for standard output)")
      ->required();
  kineto->add_option("--step-annotation", options->step_annotation,
                     "the step is the first event of this name (a record_function range)");
  kineto->add_option("--window", options->window,
                     "the step is START:END from the trace's first event, e.g. 10ms:86ms");
  kineto->add_flag("--whole", options->whole, "the step is the whole trace");
  kineto->add_flag("--json", options->json, "print one JSON object");
  kineto
      ->add_option("--snapshot", options->snapshots,
                   "a CUDA memory snapshot of the same run (torch.cuda.memory._dump_snapshot), "
                   "one per rank in rank order (repeat the flag): its allocations give sizes to a "
                   "step recorded without shapes")
      ->allow_extra_args(false);
  kineto
      ->add_option("--snapshot-device", options->snapshot_device,
                   "the snapshot's device that ran the step (default: the one with events)")
      ->check(integer_in(0, 1 << 20));
  kineto->callback([options] {
    std::vector<sim::InputFile> read;
    for (const std::string& file : options->files) read.push_back({file, "FILE"});
    for (const std::string& s : options->snapshots) read.push_back({s, "--snapshot"});
    sim::check_outputs({{options->output, "-o"}}, read);
    std::FILE* report = sim::report_stream({options->output});
    const std::vector<std::filesystem::path> inputs(options->files.begin(), options->files.end());
    const std::vector<importers::KinetoTrace> traces =
        importers::read_kineto_job(inputs, options->ranks);
    const std::vector<importers::AllocationHistory> allocations =
        importers::read_snapshot_allocation_histories(
            {options->snapshots.begin(), options->snapshots.end()},
            options->snapshot_device >= 0 ? std::optional<std::int64_t>(options->snapshot_device)
                                          : std::nullopt,
            importers::time_zeros(traces));
    const importers::JobImportResult result =
        importers::import_kineto_job(traces, import_options(*options), allocations);
    sim::write_output(options->output, sim::write_job(result.job));
    print_report(report, result, traces, *options);
  });
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "import", "Turn a profiler trace into a memplan trace, or read a memory snapshot");
  // Not require_subcommand(1): its message ("A subcommand is required") names no format.
  cmd->require_subcommand(0, 1);
  cmd->allow_extras();
  cmd->callback([cmd] {
    if (!cmd->get_subcommands().empty()) return;
    const std::vector<std::string> extras = cmd->remaining();
    throw sim::InputError(
        "import", extras.empty()
                      ? std::string("name the input's format (formats: kineto, snapshot)")
                      : fmt::format("unknown format '{}' (formats: kineto, snapshot)", extras[0]));
  });
  add_kineto_command(*cmd, options);
  add_import_snapshot_command(*cmd);
}

}  // namespace memplan::cli
