#include "importers/kineto/kineto_trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "importers/kineto/comm_args.hpp"
#include "importers/kineto/event_reader.hpp"
#include "importers/kineto/rank_split.hpp"
#include "importers/kineto/step_events.hpp"
#include "io/input_stream.hpp"
#include "io/json_reader.hpp"
#include "io/trace_io.hpp"

namespace memplan::importers {
namespace {

using nlohmann::json;

using detail::EventReader;

// Allocations over 1 PiB are corrupt.
constexpr std::int64_t kMaxAllocationBytes = std::int64_t{1} << 50;

enum class Category : std::uint8_t { kCpu, kRuntime, kKernel, kMemcpy, kMemset, kSync, kIgnored };

Category categorize(std::string_view cat, KinetoFormat& format) {
  auto mark = [&](KinetoFormat f) {
    if (format == KinetoFormat::kUnknown) format = f;
  };
  if (cat == "Operator") return mark(KinetoFormat::k2021), Category::kCpu;
  if (cat == "cpu_op" || cat == "user_annotation")
    return mark(KinetoFormat::kCurrent), Category::kCpu;
  if (cat == "Runtime") return mark(KinetoFormat::k2021), Category::kRuntime;
  if (cat == "cuda_runtime" || cat == "cuda_driver")
    return mark(KinetoFormat::kCurrent), Category::kRuntime;
  if (cat == "Kernel") return mark(KinetoFormat::k2021), Category::kKernel;
  if (cat == "kernel") return mark(KinetoFormat::kCurrent), Category::kKernel;
  if (cat == "Memcpy" || cat == "gpu_memcpy") return Category::kMemcpy;
  if (cat == "Memset" || cat == "gpu_memset") return Category::kMemset;
  if (cat == "cuda_sync") return Category::kSync;
  return Category::kIgnored;
}

void read_device(const json& document, KinetoTrace& trace) {
  auto it = document.find("deviceProperties");
  if (it == document.end() || !it->is_array() || it->empty()) return;
  const json& d = it->front();
  if (!d.is_object()) return;
  if (auto n = d.find("name"); n != d.end() && n->is_string())
    trace.device_name = n->get<std::string>();
  if (auto m = d.find("totalGlobalMem");
      m != d.end() && m->is_number_integer() && m->get<std::int64_t>() > 0) {
    trace.device_memory = m->get<std::int64_t>();
  }
}

}  // namespace

namespace {

// What the top level of the file is, once its events were read: a Chrome trace object with
// `traceEvents` (whose device properties are read into `trace`), or a bare array, refused when it
// is the legacy format without categories.
void check_top_level(const json& document, std::string_view source, std::size_t events,
                     bool categorized, KinetoTrace& trace) {
  if (document.is_object()) {
    auto it = document.find("traceEvents");
    if (it == document.end()) {
      throw sim::InputError(fmt::format("{}: $", source),
                            "no 'traceEvents': not a Chrome trace from the PyTorch profiler");
    }
    if (!it->is_array())
      throw sim::InputError(fmt::format("{}: $.traceEvents", source), "expected an array");
    read_device(document, trace);
    if (auto base = document.find("baseTimeNanoseconds");
        base != document.end() && base->is_number_integer() && base->get<std::int64_t>() >= 0) {
      trace.base_time_ns = base->get<std::int64_t>();
    }
    return;
  }
  if (!document.is_array())
    throw sim::InputError(fmt::format("{}: $", source), "expected an object with 'traceEvents'");
  if (events > 0 && !categorized) {
    throw sim::InputError(fmt::format("{}: $", source), std::string(sim::kLegacyProfilerFormat));
  }
}

MemoryEvent read_memory_event(const EventReader& r, const std::string& thread) {
  MemoryEvent m;
  m.thread = thread;
  m.time_ns = r.time_field("ts");
  const auto bytes = r.int_arg({"Bytes"});
  if (!bytes) r.fail("args.Bytes", "missing field (a [memory] event without its size)");
  if (*bytes > kMaxAllocationBytes || *bytes < -kMaxAllocationBytes) {
    r.fail("args.Bytes", fmt::format("implausible allocation size {}", *bytes));
  }
  m.bytes = *bytes;
  m.device_type = r.int_arg({"Device Type"}).value_or(0);
  m.device_id = r.int_arg({"Device Id"}).value_or(0);
  m.total_allocated = r.int_arg({"Total Allocated"});
  m.addr = r.int_arg({"Addr"});
  return m;
}

CpuEvent read_cpu_event(const EventReader& r, std::string name, const std::string& thread) {
  CpuEvent c;
  c.name = std::move(name);
  c.thread = thread;
  c.start_ns = r.time_field("ts");
  c.duration_ns = r.duration_field();
  c.external_id = r.int_arg({"External id", "external id"});
  c.sequence_number = r.int_arg({"Sequence number"});
  c.input_dims = r.dims_arg(&c.input_lists);
  c.input_types = r.types_arg();
  if (detail::is_view_op(c.name)) c.concrete_inputs = r.strings_arg("Concrete Inputs");
  c.comm = detail::read_comm_args(r, c.name);
  return c;
}

RuntimeEvent read_runtime_event(const EventReader& r, std::string name, const std::string& thread) {
  RuntimeEvent rt;
  rt.name = std::move(name);
  rt.thread = thread;
  rt.start_ns = r.time_field("ts");
  rt.duration_ns = r.duration_field();
  rt.correlation = r.int_arg({"correlation"});
  rt.external_id = r.int_arg({"external id", "External id"});
  return rt;
}

GpuEvent read_gpu_event(const EventReader& r, std::string name, Category category) {
  GpuEvent g;
  g.kind = category == Category::kKernel   ? GpuKind::kKernel
           : category == Category::kMemcpy ? GpuKind::kMemcpy
                                           : GpuKind::kMemset;
  g.name = std::move(name);
  g.start_ns = r.time_field("ts");
  g.duration_ns = r.duration_field();
  g.correlation = r.int_arg({"correlation"});
  g.external_id = r.int_arg({"external id", "External id"});
  g.stream = r.int_arg({"stream"}).value_or(0);
  if (auto b = r.int_arg({"bytes"})) {
    if (*b < 0 || *b > kMaxAllocationBytes)
      r.fail("args.bytes", fmt::format("implausible size {}", *b));
    g.bytes = *b;
  }
  if (g.kind == GpuKind::kKernel) g.comm = detail::read_comm_args(r, g.name);
  return g;
}

// -1 in Kineto's sync records means "not known".
std::optional<std::int64_t> known(std::optional<std::int64_t> v) {
  return v && *v >= 0 ? v : std::nullopt;
}

SyncEvent read_sync_event(const EventReader& r, std::string name) {
  SyncEvent s;
  s.name = std::move(name);
  s.start_ns = r.time_field("ts");
  s.stream = r.int_arg({"stream"}).value_or(-1);
  s.correlation = known(r.int_arg({"correlation"}));
  s.wait_on_stream = known(r.int_arg({"wait_on_stream"}));
  s.record_correlation = known(r.int_arg({"wait_on_cuda_event_record_corr_id"}));
  return s;
}

// The events of one pid of a file as they are read, before flows resolve the GPU activities'
// launches (a flow ends on its activity's thread, so within the pid). A file is read in one pass
// and which ranks its pids belong to is known only at its end (Note [Ranks of a file]), so an
// event's error is kept, and raised only if its pid is part of a rank.
struct EventSink {
  KinetoTrace trace;  // its events only
  // ac2g flow ends: (thread, time) of the GPU activity -> correlation id.
  std::map<std::pair<std::string, sim::Nanoseconds>, std::int64_t> flow_ends;
  std::vector<std::pair<std::size_t, std::string>> unresolved;   // GPU event index, thread
  std::optional<std::pair<std::size_t, sim::InputError>> error;  // the first bad event, its index

  void read(const json& e, std::string_view source, std::size_t i);
  void resolve_flows();
};

void EventSink::read(const json& e, std::string_view source, std::size_t i) {
  EventReader r(e, source, i);
  if (!e.is_object()) r.fail("", "expected an object");
  const std::string ph = r.string_field("ph");
  const json* cat_value = r.find(e, "cat");
  if (cat_value != nullptr && !cat_value->is_string()) r.fail("cat", "expected a string");
  const std::string cat = cat_value != nullptr ? cat_value->get<std::string>() : std::string();
  const std::string thread = r.id_field("pid") + "/" + r.id_field("tid");
  if (ph == "i" || ph == "I") {
    const json* name = r.find(e, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>() != "[memory]") return;
    trace.memory_events.push_back(read_memory_event(r, thread));
    return;
  }
  if ((ph == "s" || ph == "f") && (cat == "ac2g" || cat == "async_cpu_to_gpu")) {
    const json* id = r.find(e, "id");
    if (id == nullptr || !id->is_number_integer())
      r.fail("id", "expected the integer correlation id");
    if (ph == "f") flow_ends[{thread, r.time_field("ts")}] = id->get<std::int64_t>();
    return;
  }
  if (ph != "X") return;
  const Category category = categorize(cat, trace.format);
  if (category == Category::kIgnored) return;
  std::string name = r.string_field("name");
  if (category == Category::kCpu) {
    trace.cpu_events.push_back(read_cpu_event(r, std::move(name), thread));
  } else if (category == Category::kRuntime) {
    if (detail::starts_with(name, "hip")) trace.hip = true;
    trace.runtime_events.push_back(read_runtime_event(r, std::move(name), thread));
  } else if (category == Category::kSync) {
    trace.sync_events.push_back(read_sync_event(r, std::move(name)));
  } else {
    GpuEvent g = read_gpu_event(r, std::move(name), category);
    // Without a correlation argument, the ac2g flow that ends on this activity names it; flows
    // may come later in the file, so the lookup waits until all are read.
    if (!g.correlation) unresolved.emplace_back(trace.gpu_events.size(), thread);
    trace.gpu_events.push_back(std::move(g));
  }
}

// Flow ends may come after their GPU events in the file.
void EventSink::resolve_flows() {
  for (const auto& [index, thread] : unresolved) {
    GpuEvent& g = trace.gpu_events[index];
    if (auto f = flow_ends.find({thread, g.start_ns}); f != flow_ends.end())
      g.correlation = f->second;
  }
  flow_ends.clear();
  unresolved.clear();
}

template <typename T>
void append(std::vector<T>& to, std::vector<T>& from) {
  if (to.empty()) {
    to = std::move(from);
    return;
  }
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  from = {};
}

// Moves the events of `pid` into `trace`, its rank.
void take_events(KinetoTrace& trace, KinetoTrace& pid) {
  if (trace.format == KinetoFormat::kUnknown) trace.format = pid.format;
  trace.hip = trace.hip || pid.hip;
  append(trace.cpu_events, pid.cpu_events);
  append(trace.runtime_events, pid.runtime_events);
  append(trace.gpu_events, pid.gpu_events);
  append(trace.memory_events, pid.memory_events);
  append(trace.sync_events, pid.sync_events);
}

// Every list of a rank's events in time order.
void sort_events(KinetoTrace& trace) {
  std::stable_sort(trace.cpu_events.begin(), trace.cpu_events.end(),
                   [](const CpuEvent& a, const CpuEvent& b) {
                     if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
                     return a.duration_ns > b.duration_ns;
                   });
  std::stable_sort(trace.gpu_events.begin(), trace.gpu_events.end(),
                   [](const GpuEvent& a, const GpuEvent& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(
      trace.memory_events.begin(), trace.memory_events.end(),
      [](const MemoryEvent& a, const MemoryEvent& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(trace.sync_events.begin(), trace.sync_events.end(),
                   [](const SyncEvent& a, const SyncEvent& b) { return a.start_ns < b.start_ns; });
}

// A profiler file read in one pass: each element of `traceEvents` (or of a bare array) is read
// into its pid's sink as it completes, then dropped, so a file never sits whole in memory.
struct StreamedFile {
  json document;  // the top level, its events dropped
  std::size_t events = 0;
  bool categorized = false;                      // some event has a "cat"
  std::vector<std::optional<std::string>> pids;  // in order of appearance (nullopt: no pid)
  std::vector<EventSink> sinks;                  // parallel to pids
};

StreamedFile stream_events(sim::InputStream& input, detail::RankSplit& split) {
  StreamedFile file;
  std::map<std::optional<std::string>, std::size_t> sink_of;
  const std::string& source = input.source();
  auto read_event = [&](json& e) {
    const std::size_t i = file.events++;
    if (e.is_object() && e.contains("cat")) file.categorized = true;
    auto pid = detail::RankSplit::pid_of(e);
    split.observe(e, pid, i);
    auto [it, added] = sink_of.emplace(pid, file.sinks.size());
    if (added) {
      file.pids.push_back(std::move(pid));
      file.sinks.emplace_back();
    }
    EventSink& sink = file.sinks[it->second];
    if (sink.error) return;
    try {
      sink.read(e, source, i);
    } catch (const sim::InputError& error) {
      sink.error.emplace(i, error);
    }
  };
  sim::JsonStreaming streaming;
  streaming.element = read_event;
  streaming.streamed_key = "traceEvents";
  file.document = sim::parse_json(input, streaming);
  return file;
}

}  // namespace

namespace {

std::vector<KinetoTrace> read_ranks(sim::InputStream& input) {
  const std::string& source = input.source();
  detail::RankSplit split(source);
  StreamedFile streamed = stream_events(input, split);
  KinetoTrace file;
  file.source = source;
  check_top_level(streamed.document, source, streamed.events, streamed.categorized, file);
  file.distributed = detail::read_distributed_info(streamed.document, source);
  streamed.document = json();
  split.decide(file.distributed.has_value());
  // The first bad event of a pid that is part of a rank, in the file's order.
  const std::pair<std::size_t, sim::InputError>* error = nullptr;
  for (std::size_t s = 0; s < streamed.sinks.size(); ++s) {
    const auto& e = streamed.sinks[s].error;
    if (e && split.part_of(streamed.pids[s]) && (error == nullptr || e->first < error->first))
      error = &*e;
  }
  if (error != nullptr) throw sim::InputError(error->second);
  std::vector<KinetoTrace> traces(split.ranks(), file);
  for (std::size_t s = 0; s < streamed.sinks.size(); ++s) {
    const auto part = split.part_of(streamed.pids[s]);
    if (!part) continue;
    streamed.sinks[s].resolve_flows();
    take_events(traces[*part], streamed.sinks[s].trace);
  }
  for (std::size_t p = 0; p < traces.size(); ++p) {
    sort_events(traces[p]);
    traces[p].file_ranks = traces.size();
    traces[p].rank_rule = split.rule();
    detail::settle_distributed(traces[p], split.rank(p), traces.size());
  }
  // Ranks numbered by nothing in the file (Note [Ranks of a file], rule 3) and the same by
  // their collectives: numbered in the file's order.
  std::set<std::int32_t> numbers;
  for (const KinetoTrace& t : traces) {
    if (t.distributed) numbers.insert(t.distributed->rank);
  }
  if (traces.size() > 1 && numbers.size() != traces.size()) {
    for (std::size_t p = 0; p < traces.size(); ++p) {
      traces[p].distributed->rank = static_cast<std::int32_t>(p);
      traces[p].rank_known = true;  // by the file's order of processes
    }
  }
  std::stable_sort(traces.begin(), traces.end(), [](const KinetoTrace& a, const KinetoTrace& b) {
    return a.distributed && b.distributed && a.distributed->rank < b.distributed->rank;
  });
  return traces;
}

KinetoTrace one_rank(std::vector<KinetoTrace> ranks, std::string_view source) {
  if (ranks.size() != 1) {
    throw sim::InputError(std::string(source),
                          fmt::format("the file holds {} ranks of a job (a merged trace): import "
                                      "it as a job (memplan import kineto imports every rank)",
                                      ranks.size()));
  }
  return std::move(ranks.front());
}

}  // namespace

std::vector<KinetoTrace> parse_kineto_ranks(std::string_view text, std::string_view source) {
  sim::InputStream input(text, std::string(source), sim::Content::kJson);
  return read_ranks(input);
}

std::vector<sim::Nanoseconds> time_zeros(const std::vector<KinetoTrace>& traces) {
  std::vector<sim::Nanoseconds> zeros;
  zeros.reserve(traces.size());
  for (const KinetoTrace& t : traces) zeros.push_back(t.base_time_ns.value_or(0));
  return zeros;
}

KinetoTrace parse_kineto_trace(std::string_view text, std::string_view source) {
  return one_rank(parse_kineto_ranks(text, source), source);
}

KinetoTrace read_kineto_trace(const std::string& path) {
  return one_rank(read_kineto_ranks(path), path);
}

std::vector<KinetoTrace> read_kineto_ranks(const std::string& path) {
  sim::InputStream input(path, sim::Content::kJson);
  return read_ranks(input);
}

}  // namespace memplan::importers
