// Memory snapshots as PyTorch writes them: two real ones (traces/kineto-h200, PyTorch 2.11 on an
// H200; ../shared/data/memory-snapshots, a Transformer's step) read with the figures Python's own
// pickle gives for them (each expected number below was computed from pickle.load of the same
// file), and hand-built ones for the older formats and for each field a bad snapshot gets wrong.
#include <filesystem>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "importers/snapshot/memory_snapshot.hpp"

using namespace memplan::importers;
using Kind = PickleValue::Kind;

namespace {

PickleRef value(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}
PickleRef integer(std::int64_t i) {
  PickleRef v = value(Kind::kInt);
  v->integer = i;
  return v;
}
PickleRef text(const std::string& s) {
  PickleRef v = value(Kind::kString);
  v->text = s;
  return v;
}
PickleRef dict(std::initializer_list<std::pair<std::string, PickleRef>> entries) {
  PickleRef d = value(Kind::kDict);
  for (const auto& [k, v] : entries) d->dict.emplace_back(text(k), v);
  return d;
}
PickleRef list(std::initializer_list<PickleRef> items) {
  PickleRef l = value(Kind::kList);
  l->items = items;
  return l;
}
void set(const PickleRef& d, const std::string& key, PickleRef v) {
  for (auto& [k, old] : d->dict) {
    if (k->text == key) {
      old = std::move(v);
      return;
    }
  }
  d->dict.emplace_back(text(key), std::move(v));
}

// PyTorch 2.0's form: blocks without addresses, events without times, no allocator settings.
// One 2 MiB segment at 4096: a 1 KiB block live, then a 512-byte one freed, the rest inactive.
PickleRef old_snapshot() {
  auto block = [](std::int64_t size, const char* state) {
    return dict(
        {{"size", integer(size)}, {"requested_size", integer(size)}, {"state", text(state)}});
  };
  auto event = [](const char* action, std::int64_t addr, std::int64_t size) {
    return dict({{"action", text(action)},
                 {"addr", integer(addr)},
                 {"size", integer(size)},
                 {"stream", integer(0)}});
  };
  return dict(
      {{"segments",
        list({dict({{"device", integer(0)},
                    {"address", integer(4096)},
                    {"total_size", integer(2 << 20)},
                    {"allocated_size", integer(1024)},
                    {"active_size", integer(1024)},
                    {"stream", integer(0)},
                    {"segment_type", text("small")},
                    {"blocks", list({block(1024, "active_allocated"), block(512, "inactive"),
                                     block((2 << 20) - 1536, "inactive")})}})})},
       {"device_traces",
        list({list({event("segment_alloc", 4096, 2 << 20), event("alloc", 4096, 1024),
                    event("alloc", 5120, 512), event("free_requested", 5120, 512),
                    event("free_completed", 5120, 512)})})}});
}

MemorySnapshot read(const PickleRef& root) {
  return memory_snapshot_from(*root, "s.pickle");
}

std::string refusal(const PickleRef& root) {
  try {
    read(root);
  } catch (const memplan::sim::InputError& e) {
    return e.what();
  }
  return "(read)";
}

}  // namespace

TEST_CASE("a real snapshot of PyTorch 2.11 on an H200 reads with pickle's own figures",
          "[importers][snapshot][real]") {
  const MemorySnapshot s = read_memory_snapshot(std::filesystem::path(MEMPLAN_SOURCE_DIR) /
                                                "traces/kineto-h200/gpt_blocks.snapshot.pickle.gz");
  CHECK(s.segments.size() == 109);
  REQUIRE(s.device_traces.size() == 1);
  CHECK(s.device_traces[0].size() == 10975);
  REQUIRE(s.settings);
  CHECK(s.settings->max_split_size == -1);
  CHECK_FALSE(s.settings->expandable_segments);
  CHECK(s.settings->roundup_power2_divisions.size() == 16);
  CHECK(s.device_traces[0][0].action == "segment_alloc");
  CHECK(s.device_traces[0][0].frames.front().name == "embedding");
  const auto h = snapshot_histories(s);
  REQUIRE(h.size() == 1);
  CHECK(h[0].reserved_at_end == 9277800448);
  CHECK(h[0].allocated_at_end == 2066014208);
  CHECK(h[0].requested_at_end == 2063917056);
  CHECK(h[0].actions.at("alloc") == 3765);
  CHECK(h[0].actions.at("free_requested") == 3565);
  CHECK(h[0].actions.at("free_completed") == 3565);
  CHECK(h[0].actions.at("segment_alloc") == 80);
  CHECK(h[0].events_give_requests);
  CHECK(h[0].live_at_first_event == 733454336);
  CHECK(h[0].peak_live == 8472355016);
  CHECK(h[0].peak_live_event == 2782);
  CHECK(h[0].reserved_at_first_event == 736100352);
  CHECK(h[0].peak_reserved == 9277800448);
}

TEST_CASE("the shared Transformer step's snapshot reads with pickle's own figures",
          "[importers][snapshot][real]") {
  const auto path = std::filesystem::path(MEMPLAN_SOURCE_DIR) /
                    "../shared/data/memory-snapshots/transformer_lm_training_step.pickle";
  if (!std::filesystem::exists(path)) {
    WARN(path.string() << " is not present (../shared beside the repository): skipped");
    return;
  }
  const auto h = snapshot_histories(read_memory_snapshot(path));
  REQUIRE(h.size() == 1);
  CHECK(h[0].segments == 377);
  CHECK(h[0].events == 19136);
  CHECK(h[0].reserved_at_end == 7235174400);
  CHECK(h[0].allocated_at_end == 6816891392);
  CHECK(h[0].requested_at_end == 6808535044);
  CHECK(h[0].events_give_requests);  // 659 live blocks' allocations give requests, 651 blocks
  CHECK(h[0].live_at_first_event == 5095321600);
  CHECK(h[0].peak_live == 7013335044);
  CHECK(h[0].peak_live_event == 9966);
  CHECK(h[0].reserved_at_first_event == 7235174400);  // no segment events in its ring buffer
}

TEST_CASE("an older snapshot: blocks tile their segment, events without times",
          "[importers][snapshot]") {
  const MemorySnapshot s = read(old_snapshot());
  CHECK_FALSE(s.settings);
  REQUIRE(s.segments[0].blocks.size() == 3);
  CHECK(s.segments[0].blocks[1].address == 4096 + 1024);
  CHECK(s.segments[0].blocks[2].address == 4096 + 1536);
  const auto h = snapshot_histories(s);
  REQUIRE(h.size() == 1);
  // Live at the dump: the 1 KiB block, whose alloc gives its size (as request and block alike).
  CHECK(h[0].allocated_at_end == 1024);
  CHECK(h[0].live_at_first_event == 0);  // 1024 less (1024 + 512 - 512)
  CHECK(h[0].peak_live == 1536);         // after the second alloc
  CHECK(h[0].peak_live_event == 2);
  CHECK(h[0].reserved_at_first_event == 0);
  CHECK(h[0].peak_reserved == 2 << 20);
  CHECK_FALSE(h[0].first_us);
  // Segments only (no device_traces): the dump's figures and no events.
  PickleRef segments_only = old_snapshot();
  segments_only->dict.pop_back();
  const auto only = snapshot_histories(read(segments_only));
  CHECK(only[0].events == 0);
  CHECK(only[0].reserved_at_end == 2 << 20);
}

TEST_CASE("a snapshot with a field wrong is one InputError naming the field",
          "[importers][snapshot]") {
  auto segment = [](const PickleRef& root) { return root->dict[0].second->items[0]; };
  auto event = [](const PickleRef& root, std::size_t i) {
    return root->dict[1].second->items[0]->items[i];
  };
  PickleRef root = old_snapshot();
  set(segment(root), "total_size", text("2MiB"));
  CHECK(refusal(root) == "s.pickle: segments[0].total_size: expected an integer, found a string");
  root = old_snapshot();
  set(segment(root), "total_size", integer(1000));
  CHECK(refusal(root).find("segments[0].blocks[0].size: the blocks come to 1024 bytes, over the "
                           "segment's 1000") != std::string::npos);
  root = old_snapshot();
  set(event(root, 3), "action", integer(3));
  CHECK(refusal(root) ==
        "s.pickle: device_traces[0][3].action: expected a string, found an integer");
  // An action a newer PyTorch adds is kept and counted, not refused (and not replayed).
  root = old_snapshot();
  set(event(root, 3), "action", text("user_defined"));
  CHECK(refusal(root) == "(read)");
  CHECK(snapshot_histories(read(root))[0].actions.at("user_defined") == 1);
  root = old_snapshot();
  set(event(root, 1), "size", integer(-1));
  CHECK(refusal(root) == "s.pickle: device_traces[0][1].size: a size of -1 bytes");
  root = old_snapshot();
  root->dict.erase(root->dict.begin());
  CHECK(refusal(root) == "s.pickle: the snapshot: no 'segments'");
  CHECK(refusal(list({})) == "s.pickle: the snapshot: expected a dict, found a list");
  root = old_snapshot();
  set(segment(root)->dict.back().second->items[0], "state", text("allocated"));
  CHECK(refusal(root).find("segments[0].blocks[0].state: 'allocated' (states:") !=
        std::string::npos);
}
