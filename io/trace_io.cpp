#include "io/trace_io.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/json_reader.hpp"
#include "io/trace_body.hpp"

namespace memplan::sim {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMinInt = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMinInt32 = std::numeric_limits<std::int32_t>::min();

// A 32-bit integer whose range validate() checks (a rank, a stream), so that its message, not a
// bare range, names what is wrong.
std::int32_t read_int32(const JsonReader& r) {
  return static_cast<std::int32_t>(r.as_int(kMinInt32, kMaxId));
}

// An id in the file: a tensor's or an op's position (Id is TensorId or OpId).
template <typename Id>
Id read_id(const JsonReader& r) {
  return static_cast<Id>(static_cast<std::int32_t>(r.as_int(0, kMaxId)));
}

// An id that may be absent (none: -1).
template <typename Id>
Id read_optional_id(const JsonReader& object, std::string_view key) {
  auto r = object.find(key);
  return r ? read_id<Id>(*r) : static_cast<Id>(-1);
}

std::vector<TensorId> read_ids(const JsonReader& r) {
  std::vector<TensorId> ids;
  for (const auto& e : r.elements()) ids.push_back(read_id<TensorId>(e));
  return ids;
}

std::string read_optional_string(const JsonReader& object, std::string_view key) {
  auto r = object.find(key);
  return r ? r->as_string() : std::string();
}

std::optional<double> read_optional_positive(const JsonReader& object, std::string_view key) {
  auto r = object.find(key);
  if (!r) return std::nullopt;
  const double v = r->as_number();
  if (v <= 0) r->fail(fmt::format("{} must be positive", v));
  return v;
}

DeviceInfo read_device(const JsonReader& r) {
  r.reject_unknown_keys({"name", "memory_bytes", "h2d_bytes_per_s", "d2h_bytes_per_s",
                         "copy_latency_ns", "memory_bandwidth_bytes_per_s", "peak_flops_per_s",
                         "host_bytes_per_s", "allocator"});
  DeviceInfo d;
  d.name = r.at("name").as_string();
  d.memory_bytes = r.at("memory_bytes").as_int(kMinInt, kMaxInt);
  d.link.h2d_bytes_per_s = read_optional_positive(r, "h2d_bytes_per_s");
  d.link.d2h_bytes_per_s = read_optional_positive(r, "d2h_bytes_per_s");
  if (auto l = r.find("copy_latency_ns")) d.link.latency_ns = l->as_int(0, kNanosecondsPerSecond);
  d.memory_bandwidth_bytes_per_s = read_optional_positive(r, "memory_bandwidth_bytes_per_s");
  d.peak_flops_per_s = read_optional_positive(r, "peak_flops_per_s");
  d.host_bandwidth_bytes_per_s = read_optional_positive(r, "host_bytes_per_s");
  if (auto a = r.find("allocator")) {
    d.allocator = parse_allocator_model(a->as_string());
    if (!d.allocator) a->fail("expected \"arena\" or \"caching\"");
  }
  return d;
}

Provenance read_provenance(const JsonReader& r) {
  r.reject_unknown_keys({"source", "backend", "file", "step", "cost_model", "device", "note"});
  Provenance p;
  p.source = r.at("source").as_string();
  if (p.source != "recorded" && p.source != "imported" && p.source != "modeled" &&
      p.source != "hand-written") {
    r.at("source").fail(
        fmt::format("'{}' is not one of recorded, imported, modeled, hand-written", p.source));
  }
  p.backend = read_optional_string(r, "backend");
  p.file = read_optional_string(r, "file");
  if (auto s = r.find("step")) p.step = s->as_int(0, kMaxInt);
  p.cost_model = read_optional_string(r, "cost_model");
  p.device = read_optional_string(r, "device");
  p.note = read_optional_string(r, "note");
  return p;
}

Tensor read_tensor(const JsonReader& r) {
  r.reject_unknown_keys({"id", "name", "bytes", "kind", "shape", "dtype", "producer", "in_place_of",
                         "lifetime_only"});
  Tensor t;
  t.id = read_id<TensorId>(r.at("id"));
  t.name = r.at("name").as_string();
  t.bytes = r.at("bytes").as_int(kMinInt, kMaxInt);
  const auto kind_reader = r.at("kind");
  const std::string kind = kind_reader.as_string();
  auto parsed = parse_tensor_kind(kind);
  if (!parsed) {
    kind_reader.fail(fmt::format(
        "unknown kind '{}' (activation, parameter, gradient, optimizer_state, workspace, input)",
        kind));
  }
  t.kind = *parsed;
  if (auto s = r.find("shape")) {
    for (const auto& e : s->elements()) t.shape.push_back(e.as_int(kMinInt, kMaxInt));
  }
  t.dtype = read_optional_string(r, "dtype");
  if (!r.value().contains("producer"))
    r.fail("missing field 'producer' (null for tensors that exist before the step)");
  t.producer = read_optional_id<OpId>(r, "producer");
  t.in_place_of = read_optional_id<TensorId>(r, "in_place_of");
  if (auto l = r.find("lifetime_only")) t.lifetime_only = l->as_bool();
  return t;
}

HostSide read_host(const JsonReader& r) {
  r.reject_unknown_keys({"dispatch_ns", "synchronizes", "sync_after_ns"});
  HostSide h;
  h.dispatch_ns = r.at("dispatch_ns").as_int(0, kMaxInt);
  if (auto s = r.find("synchronizes")) {
    if (!s->value().is_boolean()) s->fail("expected true or false");
    h.synchronizes = s->value().get<bool>();
  }
  if (auto s = r.find("sync_after_ns")) {
    if (!h.synchronizes) s->fail("sync_after_ns needs \"synchronizes\": true");
    h.sync_after_ns = s->as_int(0, kMaxInt);
  }
  return h;
}

// An op's keys, by the version that brought them: v2 the host side, v3 streams and collectives.
void reject_unknown_op_keys(const JsonReader& r, std::int64_t version) {
  if (version >= 3) {
    r.reject_unknown_keys({"id", "name", "layer", "phase", "inputs", "outputs", "workspace_bytes",
                           "duration_ns", "flops", "bytes_moved", "differentiates", "algorithms",
                           "attributes", "host", "stream", "after", "collective"});
  } else if (version == 2) {
    r.reject_unknown_keys({"id", "name", "layer", "phase", "inputs", "outputs", "workspace_bytes",
                           "duration_ns", "flops", "bytes_moved", "differentiates", "algorithms",
                           "attributes", "host"});
  } else {
    r.reject_unknown_keys({"id", "name", "layer", "phase", "inputs", "outputs", "workspace_bytes",
                           "duration_ns", "flops", "bytes_moved", "differentiates", "algorithms",
                           "attributes"});
  }
}

Attributes read_attributes(const JsonReader& attrs) {
  if (!attrs.value().is_object()) attrs.fail("expected an object of numbers or lists of numbers");
  Attributes attributes;
  for (const auto& [key, value] : attrs.value().items()) {
    const JsonReader entry = attrs.inside(value);
    std::vector<double> numbers;
    if (value.is_array()) {
      for (const auto& e : entry.elements()) numbers.push_back(e.as_number());
    } else {
      numbers.push_back(entry.as_number());
    }
    attributes.emplace(key, std::move(numbers));
  }
  return attributes;
}

CollectiveKind read_collective_kind(const JsonReader& r) {
  const std::string name = r.as_string();
  std::string names;
  for (int k = 0; k < kCollectiveKindCount; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (to_string(kind) == name) return kind;
    names += fmt::format("{}{}", k == 0 ? "" : ", ", to_string(kind));
  }
  r.fail(fmt::format("unknown collective '{}' ({})", name, names));
}

Collective read_collective(const JsonReader& r) {
  r.reject_unknown_keys(
      {"kind", "in_bytes", "out_bytes", "dtype", "group", "ranks", "peer", "sequence"});
  Collective c;
  c.kind = read_collective_kind(r.at("kind"));
  c.in_bytes = r.at("in_bytes").as_int(kMinInt, kMaxInt);
  c.out_bytes = r.at("out_bytes").as_int(kMinInt, kMaxInt);
  c.dtype = read_optional_string(r, "dtype");
  c.group = read_optional_string(r, "group");
  if (auto ranks = r.find("ranks")) {
    for (const auto& e : ranks->elements()) c.ranks.push_back(read_int32(e));
  }
  if (auto peer = r.find("peer")) c.peer = static_cast<std::int32_t>(peer->as_int(0, kMaxId));
  c.sequence = r.at("sequence").as_int(kMinInt, kMaxInt);
  return c;
}

Op read_op(const JsonReader& r, std::int64_t version) {
  reject_unknown_op_keys(r, version);
  Op op;
  op.id = read_id<OpId>(r.at("id"));
  op.name = r.at("name").as_string();
  op.layer = LayerType::named(r.at("layer").as_string());
  const auto phase_reader = r.at("phase");
  const std::string phase = phase_reader.as_string();
  auto parsed = parse_phase(phase);
  if (!parsed)
    phase_reader.fail(fmt::format("unknown phase '{}' (forward, backward, update)", phase));
  op.phase = *parsed;
  op.inputs = read_ids(r.at("inputs"));
  op.outputs = read_ids(r.at("outputs"));
  op.workspace_bytes = r.at("workspace_bytes").as_int(kMinInt, kMaxInt);
  op.duration_ns = r.at("duration_ns").as_int(kMinInt, kMaxInt);
  if (auto f = r.find("flops")) op.flops = f->as_number();
  if (auto b = r.find("bytes_moved")) op.bytes_moved = b->as_int(kMinInt, kMaxInt);
  op.differentiates = read_optional_id<OpId>(r, "differentiates");
  if (auto algos = r.find("algorithms")) {
    for (const auto& a : algos->elements()) {
      a.reject_unknown_keys({"name", "workspace_bytes", "duration_ns"});
      op.algorithms.push_back({a.at("name").as_string(),
                               a.at("workspace_bytes").as_int(kMinInt, kMaxInt),
                               a.at("duration_ns").as_int(kMinInt, kMaxInt)});
    }
  }
  if (auto attrs = r.find("attributes")) op.attributes = read_attributes(*attrs);
  if (auto h = r.find("host")) op.host = read_host(*h);
  if (auto s = r.find("stream")) op.stream = read_int32(*s);
  if (auto after = r.find("after")) {
    for (const auto& e : after->elements()) op.after.push_back(read_id<OpId>(e));
  }
  if (auto c = r.find("collective")) op.collective = read_collective(*c);
  return op;
}

OrderedJson device_json(const DeviceInfo& d) {
  OrderedJson j;
  j["name"] = d.name;
  j["memory_bytes"] = d.memory_bytes;
  if (d.link.h2d_bytes_per_s) j["h2d_bytes_per_s"] = *d.link.h2d_bytes_per_s;
  if (d.link.d2h_bytes_per_s) j["d2h_bytes_per_s"] = *d.link.d2h_bytes_per_s;
  if (d.link.latency_ns) j["copy_latency_ns"] = *d.link.latency_ns;
  if (d.memory_bandwidth_bytes_per_s)
    j["memory_bandwidth_bytes_per_s"] = *d.memory_bandwidth_bytes_per_s;
  if (d.peak_flops_per_s) j["peak_flops_per_s"] = *d.peak_flops_per_s;
  if (d.host_bandwidth_bytes_per_s) j["host_bytes_per_s"] = *d.host_bandwidth_bytes_per_s;
  if (d.allocator) j["allocator"] = to_string(*d.allocator);
  return j;
}

OrderedJson provenance_json(const Provenance& p) {
  OrderedJson j;
  j["source"] = p.source;
  auto put = [&](const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
  };
  put("backend", p.backend);
  put("file", p.file);
  if (p.step) j["step"] = *p.step;
  put("cost_model", p.cost_model);
  put("device", p.device);
  put("note", p.note);
  return j;
}

// Whole numbers are written as integers ("stride": [2, 2], not [2.0, 2.0]).
OrderedJson number_json(double v) {
  if (std::trunc(v) == v && std::fabs(v) < 9.0e15) return OrderedJson(static_cast<std::int64_t>(v));
  return OrderedJson(v);
}

OrderedJson id_or_null(OpId id) {
  return id == kNoOp ? OrderedJson(nullptr) : OrderedJson(value(id));
}

OrderedJson ids_json(const std::vector<TensorId>& ids) {
  OrderedJson j = OrderedJson::array();
  for (TensorId t : ids) j.push_back(value(t));
  return j;
}

OrderedJson tensor_json(const Tensor& t) {
  OrderedJson j;
  j["id"] = value(t.id);
  j["name"] = t.name;
  j["bytes"] = t.bytes;
  j["kind"] = std::string(to_string(t.kind));
  if (!t.shape.empty()) j["shape"] = t.shape;
  if (!t.dtype.empty()) j["dtype"] = t.dtype;
  j["producer"] = id_or_null(t.producer);
  if (t.in_place_of != kNoTensor) j["in_place_of"] = value(t.in_place_of);
  if (t.lifetime_only) j["lifetime_only"] = true;
  return j;
}

OrderedJson collective_json(const Collective& c) {
  OrderedJson j;
  j["kind"] = to_string(c.kind);
  j["in_bytes"] = c.in_bytes;
  j["out_bytes"] = c.out_bytes;
  if (!c.dtype.empty()) j["dtype"] = c.dtype;
  if (!c.group.empty()) j["group"] = c.group;
  if (!c.ranks.empty()) j["ranks"] = c.ranks;
  if (c.kind == CollectiveKind::kSend || c.kind == CollectiveKind::kRecv) j["peer"] = c.peer;
  j["sequence"] = c.sequence;
  return j;
}

OrderedJson op_json(const Op& op) {
  OrderedJson j;
  j["id"] = value(op.id);
  j["name"] = op.name;
  j["layer"] = op.layer.str();
  j["phase"] = std::string(to_string(op.phase));
  j["inputs"] = ids_json(op.inputs);
  j["outputs"] = ids_json(op.outputs);
  j["workspace_bytes"] = op.workspace_bytes;
  j["duration_ns"] = op.duration_ns;
  if (op.flops) j["flops"] = *op.flops;
  if (op.bytes_moved) j["bytes_moved"] = *op.bytes_moved;
  if (op.differentiates != kNoOp) j["differentiates"] = value(op.differentiates);
  if (!op.algorithms.empty()) {
    OrderedJson algos = OrderedJson::array();
    for (const auto& a : op.algorithms) {
      OrderedJson aj;
      aj["name"] = a.name;
      aj["workspace_bytes"] = a.workspace_bytes;
      aj["duration_ns"] = a.duration_ns;
      algos.push_back(std::move(aj));
    }
    j["algorithms"] = std::move(algos);
  }
  if (!op.attributes.empty()) {
    OrderedJson attrs = OrderedJson::object();
    for (const auto& [key, values] : op.attributes) {
      OrderedJson list = OrderedJson::array();
      for (double v : values) list.push_back(number_json(v));
      attrs[key] = values.size() == 1 ? list[0] : list;
    }
    j["attributes"] = std::move(attrs);
  }
  if (op.host) {
    OrderedJson h;
    h["dispatch_ns"] = op.host->dispatch_ns;
    if (op.host->synchronizes) h["synchronizes"] = true;
    if (op.host->sync_after_ns != 0) h["sync_after_ns"] = op.host->sync_after_ns;
    j["host"] = std::move(h);
  }
  if (op.stream != 0) j["stream"] = op.stream;
  if (!op.after.empty()) {
    OrderedJson after = OrderedJson::array();
    for (OpId o : op.after) after.push_back(value(o));
    j["after"] = std::move(after);
  }
  if (op.collective) j["collective"] = collective_json(*op.collective);
  return j;
}

OrderedJson distributed_json(const Distributed& d) {
  OrderedJson j;
  if (!d.backend.empty()) j["backend"] = d.backend;
  j["rank"] = d.rank;
  j["world_size"] = d.world_size;
  if (d.step_start_ns) j["step_start_ns"] = *d.step_start_ns;
  if (d.fsdp) {
    OrderedJson f;
    f["reshard_after_forward"] = d.fsdp->reshard_after_forward;
    f["backward_prefetch"] = d.fsdp->backward_prefetch;
    j["fsdp"] = std::move(f);
  }
  return j;
}

// Fields of version 2: the host side.
bool has_host_side(const Workload& w) {
  return w.launch_ns || w.host_tail_ns != 0 ||
         std::any_of(w.ops.begin(), w.ops.end(), [](const Op& op) { return op.host.has_value(); });
}

// Fields of version 3: streams, waits between them, collectives, the step's place in a job.
bool has_job_fields(const Workload& w) {
  return w.distributed || !w.streams.empty() ||
         std::any_of(w.ops.begin(), w.ops.end(), [](const Op& op) {
           return op.stream != 0 || !op.after.empty() || op.collective.has_value();
         });
}

// A step's top-level keys, by the version that brought them: v2 the host fields, v3 the
// step's place in a job and its streams. In a file they sit beside `format` and `version`.
void reject_unknown_body_keys(const JsonReader& r, std::int64_t version, bool in_file) {
  if (!in_file) {  // a rank of a job (version 3)
    r.reject_unknown_keys({"provenance", "device", "distributed", "streams", "launch_ns",
                           "host_tail_ns", "tensors", "ops"});
  } else if (version >= 3) {
    r.reject_unknown_keys({"format", "version", "provenance", "device", "distributed", "streams",
                           "launch_ns", "host_tail_ns", "tensors", "ops"});
  } else if (version == 2) {
    r.reject_unknown_keys({"format", "version", "provenance", "device", "launch_ns", "host_tail_ns",
                           "tensors", "ops"});
  } else {
    r.reject_unknown_keys({"format", "version", "provenance", "device", "tensors", "ops"});
  }
}

}  // namespace

namespace trace_body {

namespace {

[[noreturn]] void refuse_profiler_trace(std::string_view source) {
  throw InputError(std::string(source),
                   "a profiler (Chrome) trace, not a memplan trace: convert it first with "
                   "`memplan import kineto FILE -o trace.json`");
}

// An event without a category: the legacy format of a PyTorch built without Kineto.
[[noreturn]] void refuse_profiler_event(std::string_view source, const Json& event) {
  if (!event.contains("cat"))
    throw InputError(std::string(source), std::string(kLegacyProfilerFormat));
  refuse_profiler_trace(source);
}

}  // namespace

std::int64_t read_header(const Json& document, const JsonReader& root) {
  if (document.is_object() && document.contains("traceEvents"))
    refuse_profiler_trace(root.source());
  if (document.is_array() && !document.empty() && document.front().is_object() &&
      document.front().contains("ph"))
    refuse_profiler_event(root.source(), document.front());
  const auto format = root.at("format");
  if (format.as_string() != kTraceFormatName) {
    format.fail(fmt::format("format '{}' is not '{}'", format.as_string(), kTraceFormatName));
  }
  const auto version_reader = root.at("version");
  const std::int64_t version = version_reader.as_int(kMinInt, kMaxInt);
  if (version < kTraceFormatOldestVersion || version > kTraceFormatVersion) {
    version_reader.fail(
        fmt::format("version {} is not supported (this memplan reads versions {} to {})",
                    version_reader.value().dump(), kTraceFormatOldestVersion, kTraceFormatVersion));
  }
  return version;
}

Distributed read_distributed(const JsonReader& r) {
  r.reject_unknown_keys({"backend", "rank", "world_size", "step_start_ns", "fsdp"});
  Distributed d;
  d.backend = read_optional_string(r, "backend");
  d.rank = read_int32(r.at("rank"));
  d.world_size = read_int32(r.at("world_size"));
  if (auto s = r.find("step_start_ns")) d.step_start_ns = s->as_int(0, kMaxNanoseconds);
  if (auto f = r.find("fsdp")) {
    f->reject_unknown_keys({"reshard_after_forward", "backward_prefetch"});
    FsdpSetting fsdp;
    fsdp.reshard_after_forward = f->at("reshard_after_forward").as_bool();
    fsdp.backward_prefetch = static_cast<std::int32_t>(f->at("backward_prefetch").as_int(0, 1024));
    d.fsdp = fsdp;
  }
  return d;
}

Workload read(const JsonReader& body, std::int64_t version, bool in_file) {
  reject_unknown_body_keys(body, version, in_file);
  Workload w;
  w.provenance = read_provenance(body.at("provenance"));
  w.device = read_device(body.at("device"));
  if (auto d = body.find("distributed")) w.distributed = read_distributed(*d);
  if (auto streams = body.find("streams")) {
    for (const auto& s : streams->elements()) w.streams.push_back(s.as_string());
  }
  for (const auto& t : body.at("tensors").elements()) w.tensors.push_back(read_tensor(t));
  for (const auto& o : body.at("ops").elements()) w.ops.push_back(read_op(o, version));
  if (auto l = body.find("launch_ns")) w.launch_ns = l->as_int(0, kNanosecondsPerSecond);
  if (auto t = body.find("host_tail_ns")) w.host_tail_ns = t->as_int(0, kMaxInt);
  return w;
}

void write(std::string& out, const Workload& workload) {
  out += fmt::format("\"provenance\": {},\n", provenance_json(workload.provenance).dump());
  out += fmt::format("\"device\": {},\n", device_json(workload.device).dump());
  if (workload.distributed) {
    out += fmt::format("\"distributed\": {},\n", distributed_json(*workload.distributed).dump());
  }
  if (!workload.streams.empty())
    out += fmt::format("\"streams\": {},\n", OrderedJson(workload.streams).dump());
  auto list = [&out](const char* key, const auto& items, auto to_json, bool last) {
    out += fmt::format("\"{}\": [", key);
    for (std::size_t i = 0; i < items.size(); ++i) {
      out += i == 0 ? "\n  " : ",\n  ";
      out += to_json(items[i]).dump();
    }
    out += items.empty() ? "]" : "\n]";
    out += last ? "\n" : ",\n";
  };
  if (workload.launch_ns) out += fmt::format("\"launch_ns\": {},\n", *workload.launch_ns);
  if (has_host_side(workload)) out += fmt::format("\"host_tail_ns\": {},\n", workload.host_tail_ns);
  list("tensors", workload.tensors, tensor_json, false);
  list("ops", workload.ops, op_json, true);
}

Json read_document(const std::filesystem::path& path) {
  // A Chrome trace, {"traceEvents": [...]}, is refused at its key, before its events are read; a
  // bare array of events, by read_header.
  JsonStreaming streaming;
  streaming.top_key = [&path](const std::string& key) {
    if (key == "traceEvents") refuse_profiler_trace(path.string());
  };
  return read_json(path, streaming);
}

}  // namespace trace_body

Workload trace_from_json(const Json& document, std::string_view source) {
  const JsonReader root(document, source);
  const std::int64_t version = trace_body::read_header(document, root);
  if (version >= 3 && document.contains("ranks")) {
    // A job's file: one step is read from it only when it holds one rank.
    const auto ranks = root.at("ranks");
    if (ranks.value().is_array() && ranks.value().size() > 1) {
      throw InputError(std::string(source),
                       fmt::format("holds a job of {} ranks (trace format v3 `ranks`), and this "
                                   "command reads the step of one GPU: give the file to a "
                                   "command that takes a job",
                                   ranks.value().size()));
    }
    return std::move(job_from_json(document, source).ranks.front());
  }
  Workload w = trace_body::read(root, version, /*in_file=*/true);
  validate(w, source);
  return w;
}

int trace_format_version(const Workload& workload) {
  if (has_job_fields(workload)) return 3;
  return has_host_side(workload) ? 2 : 1;
}

Workload parse_trace(std::string_view text, std::string_view source) {
  return trace_from_json(parse_json(text, source), source);
}

Workload read_trace(const std::filesystem::path& path) {
  return trace_from_json(trace_body::read_document(path), path.string());
}

std::string write_trace(const Workload& workload) {
  std::string out;
  out += "{\n";
  out += fmt::format("\"format\": \"{}\",\n", kTraceFormatName);
  out += fmt::format("\"version\": {},\n", trace_format_version(workload));
  trace_body::write(out, workload);
  out += "}\n";
  return out;
}

void write_trace_file(const Workload& workload, const std::filesystem::path& path) {
  write_file_atomically(path, write_trace(workload));
}

void require_sizes(const Workload& workload, std::string_view source) {
  if (!workload.tensors.empty() || workload.ops.empty()) return;
  throw InputError(
      std::string(source),
      "has no tensor sizes (its profiler trace recorded no shapes and no allocations): "
      "this command needs them; record with torch.profiler.profile(record_shapes=True, "
      "profile_memory=True) and import again, or import it with a memory snapshot "
      "of the same run (memplan import kineto --snapshot)");
}

void require_sizes(const Job& job, std::string_view source) {
  for (const Workload& w : job.ranks) require_sizes(w, source);
}

}  // namespace memplan::sim
