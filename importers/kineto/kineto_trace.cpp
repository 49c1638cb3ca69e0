#include "importers/kineto/kineto_trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "importers/kineto/compressed_file.hpp"

namespace memplan::importers {
namespace {

using nlohmann::json;

// Timestamps beyond this many microseconds (the year 2096 counted from the Unix epoch) are taken
// as corrupt; durations beyond a day likewise. These bounds keep every sum of times in the
// importer far from integer overflow.
constexpr double kMaxMicroseconds = 4e15;
constexpr double kMaxDurationMicroseconds = 86400e6;
// Allocations over 1 PiB are corrupt.
constexpr std::int64_t kMaxAllocationBytes = std::int64_t{1} << 50;

class EventReader {
 public:
  EventReader(const json& event, std::string_view source, std::size_t index)
      : event_(event), source_(source), index_(index) {}

  [[noreturn]] void fail(std::string_view field, const std::string& what) const {
    throw sim::InputError(
        fmt::format("{}: $.traceEvents[{}]{}{}", source_, index_, field.empty() ? "" : ".", field),
        what);
  }

  const json* find(const json& object, std::string_view key) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string string_field(std::string_view key) const {
    const json* v = find(event_, key);
    if (v == nullptr) fail(key, "missing field");
    if (!v->is_string()) fail(key, "expected a string");
    return v->get<std::string>();
  }

  // A pid or tid: an integer or a string.
  std::string id_field(std::string_view key) const {
    const json* v = find(event_, key);
    if (v == nullptr) return "?";
    if (v->is_string()) return v->get<std::string>();
    if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
    if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
    fail(key, "expected an integer or a string");
  }

  sim::Nanoseconds time_field(std::string_view key) const {
    const json* v = find(event_, key);
    if (v == nullptr) fail(key, "missing field");
    if (!v->is_number()) fail(key, "expected a number of microseconds");
    const double us = v->get<double>();
    if (!std::isfinite(us) || std::abs(us) > kMaxMicroseconds) {
      fail(key, fmt::format("implausible time {} us", us));
    }
    return static_cast<sim::Nanoseconds>(std::llround(us * 1000.0));
  }

  sim::Nanoseconds duration_field() const {
    const sim::Nanoseconds d = time_field("dur");
    if (d < 0) fail("dur", "negative duration");
    if (static_cast<double>(d) > kMaxDurationMicroseconds * 1000.0)
      fail("dur", "implausible duration (over a day)");
    return d;
  }

  const json* args() const {
    const json* a = find(event_, "args");
    if (a != nullptr && !a->is_object()) fail("args", "expected an object");
    return a;
  }

  // An optional integer argument, under any of the given spellings.
  std::optional<std::int64_t> int_arg(std::initializer_list<std::string_view> keys) const {
    const json* a = args();
    if (a == nullptr) return std::nullopt;
    for (std::string_view key : keys) {
      const json* v = find(*a, key);
      if (v == nullptr) continue;
      if (v->is_number_integer()) return v->get<std::int64_t>();
      if (v->is_number_unsigned() && v->get<std::uint64_t>() <= INT64_MAX) {
        return static_cast<std::int64_t>(v->get<std::uint64_t>());
      }
      if (v->is_number_float()) {
        const double d = v->get<double>();
        if (std::isfinite(d) && std::abs(d) < 9e18 && d == std::floor(d)) {
          return static_cast<std::int64_t>(d);
        }
      }
      fail(fmt::format("args.{}", key), "expected an integer");
    }
    return std::nullopt;
  }

  // The recorded shapes; the shapes of tensor-list arguments go to `lists` (in argument order).
  std::vector<std::vector<std::int64_t>> dims_arg(
      std::vector<std::vector<std::vector<std::int64_t>>>* lists = nullptr) const {
    std::vector<std::vector<std::int64_t>> out;
    const json* a = args();
    if (a == nullptr) return out;
    for (std::string_view key : {"Input Dims", "Input dims"}) {
      const json* v = find(*a, key);
      if (v == nullptr) continue;
      const std::string field = fmt::format("args.{}", key);
      if (!v->is_array()) fail(field, "expected an array of shapes");
      for (const json& shape : *v) {
        std::vector<std::int64_t> dims;
        // A tensor list argument is recorded as a list of shapes; memplan keeps none of them.
        if (shape.is_array()) {
          bool nested = false;
          for (const json& extent : shape) {
            if (extent.is_array()) {
              nested = true;
              break;
            }
            if (!extent.is_number_integer()) fail(field, "expected integer extents");
            const auto e = extent.get<std::int64_t>();
            if (e < 0) fail(field, fmt::format("negative extent {}", e));
            dims.push_back(e);
          }
          if (nested) {
            dims.clear();
            if (lists != nullptr) lists->push_back(list_shapes(shape, field));
          }
        } else if (!shape.is_null()) {
          fail(field, "expected each input's shape to be an array");
        }
        out.push_back(std::move(dims));
      }
      break;
    }
    return out;
  }

  std::vector<std::vector<std::int64_t>> list_shapes(const json& list,
                                                     const std::string& field) const {
    std::vector<std::vector<std::int64_t>> shapes;
    for (const json& shape : list) {
      if (!shape.is_array()) fail(field, "expected each tensor of a list to have a shape");
      std::vector<std::int64_t> dims;
      for (const json& extent : shape) {
        if (!extent.is_number_integer()) fail(field, "expected integer extents");
        const auto e = extent.get<std::int64_t>();
        if (e < 0) fail(field, fmt::format("negative extent {}", e));
        dims.push_back(e);
      }
      shapes.push_back(std::move(dims));
    }
    return shapes;
  }

  std::vector<std::string> types_arg() const {
    std::vector<std::string> out;
    const json* a = args();
    if (a == nullptr) return out;
    const json* v = find(*a, "Input type");
    if (v == nullptr) return out;
    if (!v->is_array()) fail("args.Input type", "expected an array of strings");
    for (const json& t : *v) out.push_back(t.is_string() ? t.get<std::string>() : std::string());
    return out;
  }

 private:
  const json& event_;
  std::string_view source_;
  std::size_t index_;
};

enum class Category : std::uint8_t { kCpu, kRuntime, kKernel, kMemcpy, kMemset, kIgnored };

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
  return g;
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
    trace.runtime_events.push_back(read_runtime_event(r, std::move(name), thread));
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
}

}  // namespace

KinetoTrace parse_kineto_trace(std::string_view text, std::string_view source) {
  const json document = parse_document(text, source);
  KinetoTrace trace;
  trace.source = std::string(source);
  const json& events = trace_events(document, source, trace);
  EventSink sink{trace, {}, {}};
  for (std::size_t i = 0; i < events.size(); ++i) sink.read(events[i], source, i);
  sink.finish();
  return trace;
}

KinetoTrace read_kineto_trace(const std::string& path) {
  const std::string text = read_maybe_compressed(path);
  return parse_kineto_trace(text, path);
}

}  // namespace memplan::importers
