#include "io/timeline_export.hpp"

#include <fmt/format.h>

#include "core/printable.hpp"
#include "io/job_report.hpp"
#include "memory/device_arena.hpp"

namespace memplan::sim {

namespace {
constexpr int kStallTrack = kFixedStreamCount;
constexpr int kHostTrack = kStallTrack + 1;
/// The track of a Program stream: the fixed streams first, side streams after the host's track.
int track_of(StreamId stream) {
  const int s = static_cast<int>(stream);
  return is_side_stream(stream) ? s + 2 : s;
}
/// A side stream's name: the workload's label of it, or its number.
std::string stream_name(StreamId stream, const Workload& w) {
  if (!is_side_stream(stream)) return std::string(to_string(stream)) + " stream";
  const auto s = static_cast<std::size_t>(stream) - kFixedStreamCount + 1;  // the workload's
  return s < w.streams.size() ? w.streams[s] : fmt::format("stream {}", s);
}
double to_us(Nanoseconds ns) {
  return static_cast<double>(ns) / 1000.0;
}

/// The thread that dispatches the step (Note [Host stream] in sim/engine.hpp): its dispatches,
/// launches and synchronizations.
void host_track(nlohmann::json& events, const Timeline& tl, const Workload& w, int pid) {
  events.push_back({{"ph", "M"},
                    {"pid", pid},
                    {"tid", kHostTrack},
                    {"name", "thread_name"},
                    {"args", {{"name", "host"}}}});
  for (const HostSpan& span : tl.host_spans) {
    std::string name(to_string(span.activity));
    if (span.op != kNoOp) name += " " + w.op(span.op).name;
    events.push_back({{"ph", "X"},
                      {"pid", pid},
                      {"tid", kHostTrack},
                      {"name", name},
                      {"cat", to_string(span.activity)},
                      {"ts", to_us(span.start_ns)},
                      {"dur", to_us(span.end_ns - span.start_ns)}});
  }
}

/// One process of the trace: its streams, stalls, host track and memory counter.
void append_process(nlohmann::json& events, const TraceProcess& process, int pid) {
  const Timeline& timeline = *process.timeline;
  const Program& program = *process.program;
  const Workload& workload = *process.workload;
  events.push_back(
      {{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", process.name}}}});
  for (std::size_t s = 0; s < program.streams.size(); ++s) {
    const auto stream = static_cast<StreamId>(s);
    // The host stream runs host ops only (an update on the CPU): a track when it has some.
    if (program.stream(stream).empty() && stream == StreamId::kHost) continue;
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"tid", track_of(stream)},
                      {"name", "thread_name"},
                      {"args", {{"name", stream_name(stream, workload)}}}});
  }
  events.push_back({{"ph", "M"},
                    {"pid", pid},
                    {"tid", kStallTrack},
                    {"name", "thread_name"},
                    {"args", {{"name", "compute stalls"}}}});
  for (const Span& span : timeline.spans) {
    const Instruction& in = program.stream(span.stream)[static_cast<std::size_t>(span.index)];
    nlohmann::json args = {
        {"kind", to_string(in.kind)}, {"start_ns", span.start_ns}, {"end_ns", span.end_ns}};
    if (in.buffer != kNoBuffer) {
      args["bytes"] = program.buffers[index(in.buffer)].bytes;
    }
    events.push_back({{"ph", "X"},
                      {"pid", pid},
                      {"tid", track_of(span.stream)},
                      {"name", instruction_label(in, program, workload)},
                      {"cat", to_string(in.kind)},
                      {"ts", to_us(span.start_ns)},
                      {"dur", to_us(span.end_ns - span.start_ns)},
                      {"args", args}});
  }
  if (program.host.active()) host_track(events, timeline, workload, pid);
  for (const Stall& stall : timeline.stalls) {
    std::string name(to_string(stall.cause));
    if (stall.tensor != kNoTensor) name += " " + workload.tensor(stall.tensor).name;
    if (stall.op != kNoOp) name += " (for " + workload.op(stall.op).name + ")";
    events.push_back({{"ph", "X"},
                      {"pid", pid},
                      {"tid", kStallTrack},
                      {"name", name},
                      {"cat", to_string(stall.cause)},
                      {"ts", to_us(stall.start_ns)},
                      {"dur", to_us(stall.end_ns - stall.start_ns)}});
  }
  for (const MemoryPoint& p : timeline.memory) {
    events.push_back(
        {{"ph", "C"},
         {"pid", pid},
         {"name", "device memory"},
         {"ts", to_us(p.time_ns)},
         {"args", {{"live_bytes", p.live_bytes}, {"reserved_bytes", p.reserved_bytes}}}});
  }
}

}  // namespace

std::string chrome_trace_json(const std::vector<TraceProcess>& processes) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < processes.size(); ++i)
    append_process(events, processes[i], static_cast<int>(i) + 1);
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
  return doc.dump() + "\n";
}

std::string chrome_trace_json(const Timeline& timeline, const Program& program,
                              const Workload& workload) {
  return chrome_trace_json({{&timeline, &program, &workload, "memplan simulation"}});
}

std::string memory_csv(const Timeline& timeline) {
  std::string out = "time_ns,live_bytes,reserved_bytes\n";
  for (const MemoryPoint& p : timeline.memory) {
    out += fmt::format("{},{},{}\n", p.time_ns, p.live_bytes, p.reserved_bytes);
  }
  return out;
}

nlohmann::json oom_to_json(const OomReport& oom, const Program& program, const Workload& workload) {
  nlohmann::json by_kind = nlohmann::json::object();
  for (int k = 0; k < kTensorKindCount; ++k) {
    by_kind[std::string(to_string(static_cast<TensorKind>(k)))] =
        oom.live_by_kind[static_cast<std::size_t>(k)];
  }
  by_kind["encoded"] = oom.live_encoded_bytes;
  nlohmann::json j = {{"memory", oom.host ? "host" : "device"},
                      {"time_s", to_seconds(oom.time_ns)},
                      {"time_ns", oom.time_ns},
                      {"requested_bytes", oom.requested_bytes},
                      {"capacity_bytes", oom.capacity_bytes},
                      {"live_bytes", oom.live_bytes},
                      {"live_bytes_by_kind", by_kind},
                      {"largest_free_block", oom.largest_free_block},
                      {"bytes_missing", oom.bytes_missing},
                      {"host_resident_bytes", oom.host_resident_bytes}};
  if (oom.caching) {
    const CachingAllocator::Shortfall& c = *oom.caching;
    j["caching"] = {{"pool", c.small_pool ? "small" : "large"},
                    {"largest_cached_bytes", c.largest_cached},
                    {"largest_cached_other_pool_bytes", c.largest_cached_other},
                    {"segment_bytes", c.segment_bytes},
                    {"free_for_segments_bytes", c.free_for_segments}};
  }
  j["op"] = oom.op == kNoOp ? nlohmann::json(nullptr) : nlohmann::json(workload.op(oom.op).name);
  if (oom.buffer != kNoBuffer) {
    Instruction alloc{InstrKind::kAlloc, oom.op, oom.buffer, -1, 0, 0, 0};
    j["allocation"] = instruction_label(alloc, program, workload);
  }
  return j;
}

namespace {
// Why a request PyTorch's caching allocator refuses fails, in its terms: the pool it is served
// from (the pools are separate: a large cached block does not serve a small request) has no
// cached block that large, and the segment it would take does not fit beside the segments that
// hold live blocks (the others are given back first). Its exact size says its pool where the
// rounded one would hide it (1.00 MiB for a request just over 1 MiB).
std::string caching_shortfall_text(const CachingAllocator::Shortfall& c) {
  std::string segment;
  if (c.small_pool) {
    segment = fmt::format("a new {} small segment (PyTorch's for every request up to 1 MiB)",
                          format_bytes(c.segment_bytes));
  } else if (c.requested < CachingAllocator::kMinLargeAlloc) {
    segment =
        fmt::format("a new {} segment (PyTorch's for every request over 1 MiB and under 10 MiB)",
                    format_bytes(c.segment_bytes));
  } else {
    segment = fmt::format("a new segment of {} (the request rounded up to 2 MiB)",
                          format_bytes(c.segment_bytes));
  }
  std::string text = fmt::format(
      "{} ({} B, {}), which has no cached block that large ({}), and {} does not fit in the {} "
      "the capacity leaves beside the segments holding live blocks: {} missing",
      format_bytes(c.requested), c.requested,
      c.small_pool ? "up to 1 MiB: the small pool" : "over 1 MiB: the large pool",
      c.largest_cached > 0 ? fmt::format("largest {}", format_bytes(c.largest_cached))
                           : std::string("none cached"),
      segment, format_bytes(c.free_for_segments), format_bytes(c.missing));
  if (c.largest_cached_other >= c.requested) {
    text += fmt::format(" (the {} pool's cached {} serves {} only)",
                        c.small_pool ? "large" : "small", format_bytes(c.largest_cached_other),
                        c.small_pool ? "requests over 1 MiB" : "requests up to 1 MiB");
  }
  return text;
}
}  // namespace

std::string why_not_text(const Timeline& timeline, const Program& program,
                         const Workload& workload) {
  // The names of the report are the trace's: printable, for the one line it is printed on.
  if (timeline.oom) return printable(oom_to_text(*timeline.oom, program, workload));
  if (!timeline.saturated) return {};
  return "its time runs past the end of memplan's clock (2^62 ns, about 146 years), where every "
         "time saturates: no time is known at a link, latency or host speed this slow";
}

std::string oom_to_text(const OomReport& oom, const Program& program, const Workload& workload) {
  if (oom.host) {
    return fmt::format(
        "out of pinned host memory at t={:.3f} us: host copies need {}, capacity {} ({} missing)",
        to_us(oom.time_ns), format_bytes(oom.live_bytes + oom.requested_bytes),
        format_bytes(oom.capacity_bytes), format_bytes(oom.bytes_missing));
  }
  std::string kinds;
  for (int k = 0; k < kTensorKindCount; ++k) {
    const Bytes b = oom.live_by_kind[static_cast<std::size_t>(k)];
    if (b > 0)
      kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ",
                           to_string(static_cast<TensorKind>(k)), format_bytes(b));
  }
  if (oom.live_encoded_bytes > 0)
    kinds += fmt::format("{}encoded {}", kinds.empty() ? "" : ", ",
                         format_bytes(oom.live_encoded_bytes));
  if (oom.host_resident_bytes > 0) {
    kinds += fmt::format("{}{} already on the host", kinds.empty() ? "" : "; ",
                         format_bytes(oom.host_resident_bytes));
  }
  if (!kinds.empty()) kinds = " (" + kinds + ")";  // nothing live: no empty "()"
  Instruction alloc{InstrKind::kAlloc, oom.op, oom.buffer, -1, 0, 0, 0};
  const std::string needs =
      oom.caching
          ? caching_shortfall_text(*oom.caching)
          : fmt::format("{}, largest free block {}, {} missing", format_bytes(oom.requested_bytes),
                        format_bytes(oom.largest_free_block), format_bytes(oom.bytes_missing));
  return fmt::format("out of device memory {} (t={:.3f} us): {} needs {}; live {} of {}{}",
                     oom.op == kNoOp
                         ? std::string("before the first op (tensors that exist before the step)")
                         : fmt::format("at op '{}'", workload.op(oom.op).name),
                     to_us(oom.time_ns), instruction_label(alloc, program, workload), needs,
                     format_bytes(oom.live_bytes), format_bytes(oom.capacity_bytes), kinds);
}

Bytes average_live_bytes(const Timeline& timeline) {
  if (!timeline.feasible || timeline.iteration_ns <= 0 || timeline.memory.empty()) return 0;
  long double area = 0;  // byte-nanoseconds
  for (std::size_t i = 0; i < timeline.memory.size(); ++i) {
    const Nanoseconds until =
        i + 1 < timeline.memory.size() ? timeline.memory[i + 1].time_ns : timeline.iteration_ns;
    area += static_cast<long double>(timeline.memory[i].live_bytes) *
            static_cast<long double>(until - timeline.memory[i].time_ns);
  }
  return static_cast<Bytes>(area / static_cast<long double>(timeline.iteration_ns));
}

nlohmann::json summary_json(const Timeline& timeline, const Program& program,
                            const Workload& workload, const Machine& machine) {
  nlohmann::json actions = nlohmann::json::object();
  for (int a = 0; a < kActionCount; ++a) {
    actions[std::string(to_string(static_cast<Action>(a)))] =
        program.action_counts[static_cast<std::size_t>(a)];
  }
  nlohmann::json stalls = nlohmann::json::object();
  for (int c = 0; c < kStallCauseCount; ++c) {
    stalls[std::string(to_string(static_cast<StallCause>(c)))] =
        to_seconds(timeline.stall_ns_by_cause[static_cast<std::size_t>(c)]);
  }
  nlohmann::json j = {
      {"feasible", timeline.feasible},
      // The step as a training loop sees it (the period back to back), and the step alone.
      {"step_s", timeline.feasible ? nlohmann::json(to_seconds(timeline.period_ns))
                                   : nlohmann::json(nullptr)},
      {"step_alone_s", timeline.feasible ? nlohmann::json(to_seconds(timeline.iteration_ns))
                                         : nlohmann::json(nullptr)},
      {"compute_s", to_seconds(timeline.op_compute_ns)},
      {"peak_bytes", timeline.peak_bytes},
      {"peak_reserved_bytes", timeline.peak_reserved_bytes},
      {"average_live_bytes", average_live_bytes(timeline)},
      {"peak_host_bytes", timeline.peak_host_bytes},
      // A saturated run's stalls are the clock's end, not times.
      {"stall_s",
       timeline.saturated ? nlohmann::json() : nlohmann::json(to_seconds(timeline.stall_ns()))},
      {"stall_s_by_cause", timeline.saturated ? nlohmann::json() : stalls},
      {"actions", actions},
      {"instructions", program.instruction_count()},
      {"machine",
       {{"memory_bytes", machine.memory_bytes},
        {"allocator", to_string(machine.allocator)},
        {"alloc_conf", to_string(machine.allocator_config)},
        {"h2d_bytes_per_s", machine.link.h2d_bytes_per_s},
        {"d2h_bytes_per_s", machine.link.d2h_bytes_per_s},
        {"copy_latency_ns", machine.link.latency_ns},
        {"memory_bandwidth_bytes_per_s", machine.memory_bandwidth_bytes_per_s}}}};
  if (machine.interconnect) {
    const Interconnect& net = *machine.interconnect;
    j["machine"]["interconnect"] = {{"name", net.name},
                                    {"intra_bytes_per_s", net.intra.bytes_per_s},
                                    {"intra_latency_ns", net.intra.latency_ns},
                                    {"inter_bytes_per_s", net.inter.bytes_per_s},
                                    {"inter_latency_ns", net.inter.latency_ns},
                                    {"gpus_per_node", net.gpus_per_node}};
  }
  j["oom"] = timeline.oom ? oom_to_json(*timeline.oom, program, workload) : nlohmann::json(nullptr);
  j["saturated"] = timeline.saturated;
  j["host_ops_s"] = to_seconds(timeline.host_ops_ns);
  if (!program.collectives.empty())
    j["collectives"] = collectives_json(timeline, program, workload);
  if (program.host.active()) {
    j["host_busy_s"] = to_seconds(timeline.host_busy_ns);
    j["gpu_idle_share"] =
        timeline.feasible ? nlohmann::json(timeline.gpu_idle_share()) : nlohmann::json();
  }
  return j;
}

std::string summary_text(const Timeline& timeline, const Program& program, const Workload& workload,
                         const Machine& machine, std::string_view policy) {
  std::string out;
  out += fmt::format("plan        {} (keep {}, swap {}, recompute {}, encode {})\n", policy,
                     program.action_counts[0], program.action_counts[1], program.action_counts[2],
                     program.action_counts[3]);
  out += fmt::format(
      "machine     {} device memory ({} allocator{}), h2d {:.2f} GB/s, d2h {:.2f} GB/s, copy "
      "latency {:.3f} us\n",
      format_bytes(machine.memory_bytes), to_string(machine.allocator),
      machine.allocator_config == AllocatorConfig{} ? ""
                                                    : ", " + to_string(machine.allocator_config),
      machine.link.h2d_bytes_per_s / 1e9, machine.link.d2h_bytes_per_s / 1e9,
      to_us(machine.link.latency_ns));
  if (machine.interconnect && !program.collectives.empty()) {
    const Interconnect& net = *machine.interconnect;
    out += fmt::format(
        "interconnect {}: {:.0f} GB/s within a node of {}, {:.0f} GB/s between nodes\n", net.name,
        net.intra.bytes_per_s / 1e9, net.gpus_per_node, net.inter.bytes_per_s / 1e9);
  }
  if (!timeline.feasible) {
    const std::string why = why_not_text(timeline, program, workload);
    out += fmt::format("infeasible  {}\n", why.empty() ? "unknown" : why);
    return out;
  }
  if (program.host.active()) {
    // The host's dispatching is part of the step: a percentage over compute alone would charge
    // the plan with the idle time the recorded step already had.
    out += fmt::format(
        "step        {:.3f} ms back to back ({:.3f} ms alone; compute {:.3f} ms, host {:.3f} ms)\n",
        to_seconds(timeline.period_ns) * 1e3, to_seconds(timeline.iteration_ns) * 1e3,
        to_seconds(timeline.op_compute_ns) * 1e3, to_seconds(timeline.host_busy_ns) * 1e3);
  } else {
    out += fmt::format(
        "step        {:.3f} ms (compute {:.3f} ms, +{:.1f}%)\n",
        to_seconds(timeline.iteration_ns) * 1e3, to_seconds(timeline.op_compute_ns) * 1e3,
        timeline.op_compute_ns > 0
            ? 100.0 * static_cast<double>(timeline.iteration_ns - timeline.op_compute_ns) /
                  static_cast<double>(timeline.op_compute_ns)
            : 0.0);
  }
  out += fmt::format(
      "stalls      {:.3f} ms (swap-in {:.3f}, swap-out {:.3f}, recompute {:.3f}, codec {:.3f})\n",
      to_seconds(timeline.stall_ns()) * 1e3, to_seconds(timeline.stall_ns_by_cause[0]) * 1e3,
      to_seconds(timeline.stall_ns_by_cause[1]) * 1e3,
      to_seconds(timeline.stall_ns_by_cause[2]) * 1e3,
      to_seconds(timeline.stall_ns_by_cause[3]) * 1e3);
  out += fmt::format("memory      peak {} live, {} reserved of {}; host peak {}\n",
                     format_bytes(timeline.peak_bytes), format_bytes(timeline.peak_reserved_bytes),
                     format_bytes(machine.memory_bytes), format_bytes(timeline.peak_host_bytes));
  if (program.host.active()) {
    out += fmt::format(
        "host        {:.3f} ms busy dispatching and launching; GPU idle {:.1f}% of "
        "the step\n",
        to_seconds(timeline.host_busy_ns) * 1e3, 100.0 * timeline.gpu_idle_share());
  }
  if (!program.stream(StreamId::kHost).empty()) {
    out += fmt::format("host ops    {:.3f} ms on the CPU (the update on the host)\n",
                       to_seconds(timeline.host_ops_ns) * 1e3);
  }
  out += collectives_text(timeline, program, workload);
  out += fmt::format("program     {} instructions\n", program.instruction_count());
  return out;
}

}  // namespace memplan::sim
