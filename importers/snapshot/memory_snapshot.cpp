#include "importers/snapshot/memory_snapshot.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"
#include "io/input_stream.hpp"

namespace memplan::importers {

namespace {

constexpr std::int64_t kMaxSize = std::int64_t{1} << 50;  // 1 PiB: past any device's memory

// total += v, or InputError when the sizes' sum passes what 64 bits hold (sizes are at most
// kMaxSize, so only a hostile snapshot of thousands of them gets there).
void add(std::int64_t& total, std::int64_t v) {
  if (__builtin_add_overflow(total, v, &total)) {
    throw sim::InputError("", "the snapshot's sizes sum past 2^63 bytes");
  }
}
std::int64_t sum(std::int64_t a, std::int64_t b) {
  add(a, b);
  return a;
}
std::int64_t difference(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) {
    throw sim::InputError("", "the snapshot's sizes sum past 2^63 bytes");
  }
  return out;
}

using Kind = PickleValue::Kind;

// Typed access to the pickle's values, every failure one line naming the field's path.
class Fields {
 public:
  explicit Fields(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw sim::InputError(source_, fmt::format("{}: {}", path, what));
  }
  const PickleValue& dict(const PickleValue& v, const std::string& path) const {
    if (v.kind != Kind::kDict) fail(path, "expected a dict, found " + kind_name(v.kind));
    return v;
  }
  /// A list or a tuple (pickle writes Python's lists and tuples alike to this reader).
  const std::vector<PickleRef>& sequence(const PickleValue& v, const std::string& path) const {
    if (v.kind != Kind::kList && v.kind != Kind::kTuple) {
      fail(path, "expected a list, found " + kind_name(v.kind));
    }
    return v.items;
  }
  static const PickleValue* find(const PickleValue& dict, std::string_view key) {
    for (const auto& [k, v] : dict.dict) {
      if (k->kind == Kind::kString && k->text == key) return v.get();
    }
    return nullptr;
  }
  const PickleValue& required(const PickleValue& dict, std::string_view key,
                              const std::string& path) const {
    const PickleValue* v = find(dict, key);
    if (v == nullptr) fail(path, fmt::format("no '{}'", key));
    return *v;
  }
  std::int64_t integer(const PickleValue& v, const std::string& path) const {
    if (v.kind != Kind::kInt) fail(path, "expected an integer, found " + kind_name(v.kind));
    return v.integer;
  }
  std::int64_t size(const PickleValue& v, const std::string& path) const {
    const std::int64_t n = integer(v, path);
    if (n < 0) fail(path, fmt::format("a size of {} bytes", n));
    if (n > kMaxSize) {
      fail(path, fmt::format("a size of {} bytes, more than the 1 PiB a device holds", n));
    }
    return n;
  }
  double number(const PickleValue& v, const std::string& path) const {
    if (v.kind == Kind::kInt) return static_cast<double>(v.integer);
    if (v.kind != Kind::kFloat) fail(path, "expected a number, found " + kind_name(v.kind));
    return v.number;
  }
  const std::string& text(const PickleValue& v, const std::string& path) const {
    if (v.kind != Kind::kString) fail(path, "expected a string, found " + kind_name(v.kind));
    return v.text;
  }
  bool flag(const PickleValue& v, const std::string& path) const {
    if (v.kind != Kind::kBool) fail(path, "expected a boolean, found " + kind_name(v.kind));
    return v.boolean;
  }

 private:
  const std::string& source_;
};

std::vector<SnapshotFrame> read_frames(const Fields& f, const PickleValue& owner,
                                       const std::string& path) {
  std::vector<SnapshotFrame> frames;
  const PickleValue* list = Fields::find(owner, "frames");
  if (list == nullptr) return frames;
  const auto& items = f.sequence(*list, path + ".frames");
  frames.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = fmt::format("{}.frames[{}]", path, i);
    const PickleValue& d = f.dict(*items[i], at);
    frames.push_back({f.text(f.required(d, "name", at), at + ".name"),
                      f.text(f.required(d, "filename", at), at + ".filename"),
                      f.integer(f.required(d, "line", at), at + ".line")});
  }
  return frames;
}

SnapshotSegment read_segment(const Fields& f, const PickleValue& v, const std::string& path) {
  const PickleValue& d = f.dict(v, path);
  SnapshotSegment s;
  s.device = f.integer(f.required(d, "device", path), path + ".device");
  s.address = f.integer(f.required(d, "address", path), path + ".address");
  s.total_size = f.size(f.required(d, "total_size", path), path + ".total_size");
  s.allocated_size = f.size(f.required(d, "allocated_size", path), path + ".allocated_size");
  s.active_size = f.size(f.required(d, "active_size", path), path + ".active_size");
  s.stream = f.integer(f.required(d, "stream", path), path + ".stream");
  s.segment_type = f.text(f.required(d, "segment_type", path), path + ".segment_type");
  if (const PickleValue* e = Fields::find(d, "is_expandable")) {
    s.expandable = f.flag(*e, path + ".is_expandable");
  }
  const auto& blocks = f.sequence(f.required(d, "blocks", path), path + ".blocks");
  std::int64_t next = s.address;  // older snapshots give no block addresses: they tile the segment
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = fmt::format("{}.blocks[{}]", path, i);
    const PickleValue& b = f.dict(*blocks[i], at);
    SnapshotBlock block;
    block.size = f.size(f.required(b, "size", at), at + ".size");
    block.address = next;
    if (const PickleValue* a = Fields::find(b, "address")) {
      block.address = f.integer(*a, at + ".address");
    }
    if (const PickleValue* r = Fields::find(b, "requested_size")) {
      block.requested_size = f.size(*r, at + ".requested_size");
    }
    block.state = f.text(f.required(b, "state", at), at + ".state");
    if (block.state != "active_allocated" && block.state != "active_pending_free" &&
        block.state != "inactive") {
      f.fail(at + ".state", fmt::format("'{}' (states: active_allocated, active_pending_free, "
                                        "inactive)",
                                        block.state));
    }
    covered += block.size;
    if (covered > s.total_size) {
      f.fail(at + ".size", fmt::format("the blocks come to {} bytes, over the segment's {}",
                                       covered, s.total_size));
    }
    next = block.address + block.size;
    s.blocks.push_back(std::move(block));
  }
  return s;
}

SnapshotEvent read_event(const Fields& f, const PickleValue& v, const std::string& path) {
  const PickleValue& d = f.dict(v, path);
  SnapshotEvent e;
  e.action = f.text(f.required(d, "action", path), path + ".action");
  // The actions that name a block or a segment by its address; an `oom` names none and says how
  // much the device had free; others (snapshot, annotate, any a newer PyTorch adds) are kept
  // with their address if they give one.
  static const char* const kAddressed[] = {"alloc",         "free_requested", "free_completed",
                                           "segment_alloc", "segment_free",   "segment_map",
                                           "segment_unmap"};
  if (std::find(std::begin(kAddressed), std::end(kAddressed), e.action) != std::end(kAddressed)) {
    e.address = f.integer(f.required(d, "addr", path), path + ".addr");
  } else if (const PickleValue* a = Fields::find(d, "addr")) {
    e.address = f.integer(*a, path + ".addr");
  }
  if (e.action == "oom") {
    if (const PickleValue* free = Fields::find(d, "device_free")) {
      e.device_free = f.size(*free, path + ".device_free");
    }
  }
  e.size = f.size(f.required(d, "size", path), path + ".size");
  e.stream = f.integer(f.required(d, "stream", path), path + ".stream");
  if (const PickleValue* t = Fields::find(d, "time_us"))
    e.time_us = f.number(*t, path + ".time_us");
  e.frames = read_frames(f, d, path);
  return e;
}

AllocatorSettings read_settings(const Fields& f, const PickleValue& v) {
  const std::string path = "allocator_settings";
  const PickleValue& d = f.dict(v, path);
  AllocatorSettings s;
  if (const PickleValue* c = Fields::find(d, "PYTORCH_CUDA_ALLOC_CONF")) {
    s.alloc_conf = f.text(*c, path + ".PYTORCH_CUDA_ALLOC_CONF");
  }
  if (const PickleValue* m = Fields::find(d, "max_split_size")) {
    s.max_split_size = f.integer(*m, path + ".max_split_size");
  }
  if (const PickleValue* g = Fields::find(d, "garbage_collection_threshold")) {
    s.garbage_collection_threshold = f.number(*g, path + ".garbage_collection_threshold");
  }
  if (const PickleValue* e = Fields::find(d, "expandable_segments")) {
    s.expandable_segments = f.flag(*e, path + ".expandable_segments");
  }
  if (const PickleValue* r = Fields::find(d, "roundup_power2_divisions")) {
    const std::string at = path + ".roundup_power2_divisions";
    for (const auto& [key, value] : f.dict(*r, at).dict) {
      // Keys are sizes in MiB, written as strings ("1", "2", ... "16384") or integers.
      std::int64_t mib = 0;
      if (key->kind == Kind::kInt) {
        mib = key->integer;
      } else {
        const std::string& k = f.text(*key, at);
        const auto [end, error] = std::from_chars(k.data(), k.data() + k.size(), mib);
        if (error != std::errc() || end != k.data() + k.size()) {
          f.fail(at, fmt::format("key '{}' is not a size in MiB", k));
        }
      }
      s.roundup_power2_divisions[mib] = f.integer(*value, fmt::format("{}[{}]", at, mib));
    }
  }
  return s;
}

}  // namespace

MemorySnapshot memory_snapshot_from(const PickleValue& root, const std::string& source) {
  const Fields f(source);
  const PickleValue& d = f.dict(root, "the snapshot");
  MemorySnapshot s;
  const auto& segments = f.sequence(f.required(d, "segments", "the snapshot"), "segments");
  s.segments.reserve(segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    s.segments.push_back(read_segment(f, *segments[i], fmt::format("segments[{}]", i)));
  }
  if (const PickleValue* traces = Fields::find(d, "device_traces")) {
    const auto& devices = f.sequence(*traces, "device_traces");
    for (std::size_t dev = 0; dev < devices.size(); ++dev) {
      const auto& events = f.sequence(*devices[dev], fmt::format("device_traces[{}]", dev));
      std::vector<SnapshotEvent>& out = s.device_traces.emplace_back();
      out.reserve(events.size());
      for (std::size_t i = 0; i < events.size(); ++i) {
        out.push_back(read_event(f, *events[i], fmt::format("device_traces[{}][{}]", dev, i)));
      }
    }
  }
  if (const PickleValue* settings = Fields::find(d, "allocator_settings")) {
    s.settings = read_settings(f, *settings);
  }
  return s;
}

MemorySnapshot read_memory_snapshot(const std::filesystem::path& path) {
  sim::InputStream input(path, sim::Content::kBinary);
  const PickleDocument pickle = read_pickle(input);
  return memory_snapshot_from(*pickle, path.string());
}

std::vector<SnapshotHistory> snapshot_histories(const MemorySnapshot& snapshot) {
  std::map<std::int64_t, SnapshotHistory> by_device;
  std::map<std::int64_t, std::map<std::int64_t, const SnapshotBlock*>> live;  // device, address
  for (const SnapshotSegment& s : snapshot.segments) {
    SnapshotHistory& h = by_device[s.device];
    h.device = s.device;
    ++h.segments;
    h.largest_segment = std::max(h.largest_segment, s.total_size);
    add(h.reserved_at_end, s.total_size);
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state != "active_allocated") continue;
      add(h.allocated_at_end, b.size);
      add(h.requested_at_end, b.requested_size);
      live[s.device][b.address] = &b;
    }
  }
  for (std::size_t dev = 0; dev < snapshot.device_traces.size(); ++dev) {
    const auto& events = snapshot.device_traces[dev];
    if (events.empty()) continue;
    const auto device = static_cast<std::int64_t>(dev);
    SnapshotHistory& h = by_device[device];
    h.device = device;
    h.events = events.size();
    // The unit of the events' sizes: the live blocks' last allocations, against their blocks.
    std::map<std::int64_t, std::int64_t> last_alloc;  // address -> size, while not freed
    for (const SnapshotEvent& e : events) {
      if (e.action == "alloc") last_alloc[e.address] = e.size;
      if (e.action == "free_requested") last_alloc.erase(e.address);
    }
    std::size_t as_requested = 0, as_block = 0;
    for (const auto& [address, size] : last_alloc) {
      const auto it = live[device].find(address);
      if (it == live[device].end()) continue;
      as_requested += size == it->second->requested_size ? 1 : 0;
      as_block += size == it->second->size ? 1 : 0;
    }
    h.events_give_requests = as_requested >= as_block;
    // What each event does to the live bytes and to what is reserved (module comment).
    std::vector<std::int64_t> live_net(events.size()), reserved_net(events.size());
    std::int64_t net_live = 0, net_reserved = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const SnapshotEvent& e = events[i];
      ++h.actions[e.action];
      if (e.action == "alloc") add(net_live, e.size);
      if (e.action == "free_requested") add(net_live, -e.size);
      if (e.action == "segment_alloc" || e.action == "segment_map") add(net_reserved, e.size);
      if (e.action == "segment_free" || e.action == "segment_unmap") add(net_reserved, -e.size);
      live_net[i] = net_live;
      reserved_net[i] = net_reserved;
      if (e.time_us) {
        if (!h.first_us) h.first_us = e.time_us;
        h.last_us = e.time_us;
      }
    }
    const std::int64_t live_at_end =
        h.events_give_requests ? h.requested_at_end : h.allocated_at_end;
    h.live_at_first_event = difference(live_at_end, net_live);
    h.reserved_at_first_event = difference(h.reserved_at_end, net_reserved);
    h.peak_live = h.live_at_first_event;
    h.peak_reserved = h.reserved_at_first_event;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (sum(h.live_at_first_event, live_net[i]) > h.peak_live) {
        h.peak_live = sum(h.live_at_first_event, live_net[i]);
        h.peak_live_event = i;
      }
      h.peak_reserved = std::max(h.peak_reserved, sum(h.reserved_at_first_event, reserved_net[i]));
    }
  }
  std::vector<SnapshotHistory> out;
  out.reserve(by_device.size());
  for (auto& [device, h] : by_device) out.push_back(std::move(h));
  return out;
}

}  // namespace memplan::importers
