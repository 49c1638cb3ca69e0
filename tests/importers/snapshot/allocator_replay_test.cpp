// The caching-allocator model against the real allocator: each H200 snapshot's events replayed
// through it (importers/snapshot/allocator_replay.hpp). Where the model is PyTorch's allocator,
// what it reserves, hands out and how many segments it holds at the dump are the snapshot's to the
// byte; the snapshots where it is not are in docs/snapshots.md with their causes.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "importers/snapshot/allocator_replay.hpp"
#include "importers/snapshot/memory_snapshot.hpp"

using namespace memplan::importers;

namespace {

struct Replayed {
  SnapshotHistory snapshot;
  AllocatorReplay model;
};

Replayed replay(const std::string& name) {
  const MemorySnapshot s =
      read_memory_snapshot(std::filesystem::path(MEMPLAN_SOURCE_DIR) / "traces/kineto-h200" /
                           (name + ".snapshot.pickle.gz"));
  const auto histories = snapshot_histories(s);
  REQUIRE(histories.size() == 1);
  return {histories[0], replay_allocator(s, histories[0])};
}

}  // namespace

TEST_CASE("the caching-allocator model replays PyTorch 2.11's allocator on an H200 to the byte",
          "[importers][snapshot][real]") {
  // A GPT block stack (bf16, SDPA, AdamW), plain and with save_on_cpu: reserved, allocated and the
  // segments at the dump, and the peak reserved.
  for (const char* name : {"gpt_blocks", "gpt_offloaded"}) {
    CAPTURE(name);
    const Replayed r = replay(name);
    CHECK(r.model.failed_allocs == 0);
    CHECK(r.model.reserved_at_end == r.snapshot.reserved_at_end);
    CHECK(r.model.peak_reserved == r.snapshot.peak_reserved);
    CHECK(r.model.allocated_at_end == r.snapshot.allocated_at_end);
    CHECK(r.model.segments_at_end == r.snapshot.segments);
    CHECK(r.model.differences.empty());
  }
  // Hugging Face GPT-2: the segments to the byte; 2.25 MiB fewer bytes handed out at the dump
  // (blocks the real allocator left unsplit are other blocks in the model).
  const Replayed gpt2 = replay("gpt2");
  CHECK(gpt2.model.reserved_at_end == gpt2.snapshot.reserved_at_end);
  CHECK(gpt2.model.segments_at_end == gpt2.snapshot.segments);
  CHECK(gpt2.snapshot.allocated_at_end - gpt2.model.allocated_at_end == 2359296);
}

TEST_CASE("a hand-made history replays through the model as worked out", "[importers][snapshot]") {
  // One 2 MiB small segment (cudaMalloc of the first request up to 1 MiB); a 1 KiB block, then a
  // 512-byte one split from the same segment and freed again (merged back).
  MemorySnapshot s;
  SnapshotSegment segment;
  segment.address = 4096;
  segment.total_size = 2 << 20;
  segment.segment_type = "small";
  segment.blocks = {{4096, 1024, 1024, "active_allocated"},
                    {5120, (2 << 20) - 1024, 0, "inactive"}};
  s.segments = {segment};
  s.device_traces = {{{"segment_alloc", 4096, 2 << 20, 0, {}, {}},
                      {"alloc", 4096, 1024, 0, {}, {}},
                      {"alloc", 5120, 512, 0, {}, {}},
                      {"free_requested", 5120, 512, 0, {}, {}},
                      {"free_completed", 5120, 512, 0, {}, {}}}};
  const auto h = snapshot_histories(s);
  const AllocatorReplay r = replay_allocator(s, h[0]);
  CHECK(r.seeded_blocks == 0);
  CHECK(r.reserved_at_end == 2 << 20);
  CHECK(r.peak_reserved == 2 << 20);
  CHECK(r.allocated_at_end == 1024);
  CHECK(r.peak_allocated == 1536);
  CHECK(r.segments_at_end == 1);
  // A block live before the first event (freed by the history, never allocated in it) is
  // allocated first: a second 2 MiB segment is not needed, the peak is 1 KiB higher.
  s.device_traces[0].push_back({"free_requested", 8192, 1024, 0, {}, {}});
  s.device_traces[0].push_back({"free_completed", 8192, 1024, 0, {}, {}});
  const AllocatorReplay seeded = replay_allocator(s, snapshot_histories(s)[0]);
  CHECK(seeded.seeded_blocks == 1);
  CHECK(seeded.peak_allocated == 2560);
  CHECK(seeded.reserved_at_end == 2 << 20);
  CHECK(seeded.allocated_at_end == 1024);
}
