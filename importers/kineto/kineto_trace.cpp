#include "importers/kineto/kineto_trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "importers/compressed_file.hpp"
#include "importers/kineto/comm_args.hpp"
#include "importers/kineto/event_reader.hpp"
#include "importers/kineto/rank_split.hpp"
#include "importers/kineto/step_events.hpp"

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

json parse_document(std::string_view text, std::string_view source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw sim::InputError(
        std::string(source),
        fmt::format("not complete JSON (truncated or corrupt?) at byte {}", e.byte));
  } catch (const json::exception& e) {
    // A number too large for any JSON number type (out_of_range.406), and the like.
    throw sim::InputError(std::string(source), fmt::format("unreadable JSON: {}", e.what()));
  }
}

// The array of events: `traceEvents` of a Chrome trace object (whose device properties are read
// into `trace`), or a bare array, refused when it is the legacy format without categories.
const json& trace_events(const json& document, std::string_view source, KinetoTrace& trace) {
  if (document.is_object()) {
    auto it = document.find("traceEvents");
    if (it == document.end()) {
      throw sim::InputError(fmt::format("{}: $", source),
                            "no 'traceEvents': not a Chrome trace from the PyTorch profiler");
    }
    if (!it->is_array())
      throw sim::InputError(fmt::format("{}: $.traceEvents", source), "expected an array");
    read_device(document, trace);
    return *it;
  }
  if (!document.is_array())
    throw sim::InputError(fmt::format("{}: $", source), "expected an object with 'traceEvents'");
  const bool categorized = std::any_of(document.begin(), document.end(), [](const json& e) {
    return e.is_object() && e.contains("cat");
  });
  if (!document.empty() && !categorized) {
    throw sim::InputError(
        fmt::format("{}: $", source),
        "a bare array of events without categories: the legacy torch.autograd.profiler format "
        "of a PyTorch built without Kineto, which records no kernels, shapes or memory; record "
        "with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
        "record_shapes=True, profile_memory=True) on a PyTorch built with Kineto (the pip and "
        "conda builds are)");
  }
  return document;
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

// The events of one file as they are read, before flows resolve the GPU activities' launches.
struct EventSink {
  KinetoTrace& trace;
  // ac2g flow ends: (thread, time) of the GPU activity -> correlation id.
  std::map<std::pair<std::string, sim::Nanoseconds>, std::int64_t> flow_ends;
  std::vector<std::pair<std::size_t, std::string>> unresolved;  // GPU event index, thread

  void read(const json& e, std::string_view source, std::size_t i);
  void finish();
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

// Flow ends may come after their GPU events in the file; then every list in time order.
void EventSink::finish() {
  for (const auto& [index, thread] : unresolved) {
    GpuEvent& g = trace.gpu_events[index];
    if (auto f = flow_ends.find({thread, g.start_ns}); f != flow_ends.end())
      g.correlation = f->second;
  }
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

}  // namespace

std::vector<KinetoTrace> parse_kineto_ranks(std::string_view text, std::string_view source) {
  const json document = parse_document(text, source);
  KinetoTrace file;
  file.source = std::string(source);
  const json& events = trace_events(document, source, file);
  file.distributed = detail::read_distributed_info(document, source);
  const detail::RankSplit split(events, source, file.distributed.has_value());
  std::vector<KinetoTrace> traces(split.ranks(), file);
  std::vector<EventSink> sinks;
  sinks.reserve(traces.size());
  for (KinetoTrace& t : traces) sinks.push_back(EventSink{t, {}, {}});
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (const auto part = split.part_of(events[i])) sinks[*part].read(events[i], source, i);
  }
  for (std::size_t p = 0; p < traces.size(); ++p) {
    sinks[p].finish();
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

KinetoTrace parse_kineto_trace(std::string_view text, std::string_view source) {
  std::vector<KinetoTrace> ranks = parse_kineto_ranks(text, source);
  if (ranks.size() != 1) {
    throw sim::InputError(std::string(source),
                          fmt::format("the file holds {} ranks of a job (a merged trace): import "
                                      "it as a job (memplan import kineto imports every rank)",
                                      ranks.size()));
  }
  return std::move(ranks.front());
}

KinetoTrace read_kineto_trace(const std::string& path) {
  const std::string text = read_maybe_compressed(path);
  return parse_kineto_trace(text, path);
}

std::vector<KinetoTrace> read_kineto_ranks(const std::string& path) {
  const std::string text = read_maybe_compressed(path);
  return parse_kineto_ranks(text, path);
}

}  // namespace memplan::importers
