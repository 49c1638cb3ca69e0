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

Replayed replay(const std::filesystem::path& path) {
  const MemorySnapshot s = read_memory_snapshot(path);
  const auto histories = snapshot_histories(s);
  REQUIRE(histories.size() == 1);
  return {histories[0], replay_allocator(s, histories[0])};
}

// Every figure of the model equal to the snapshot's, at the dump and at every event.
void check_replayed_exactly(const Replayed& r) {
  CHECK(r.model.failed_allocs == 0);
  CHECK(r.model.reserved_at_end == r.snapshot.reserved_at_end);
  CHECK(r.model.peak_reserved == r.snapshot.peak_reserved);
  CHECK(r.model.allocated_at_end == r.snapshot.allocated_at_end);
  CHECK(r.model.segments_at_end == r.snapshot.segments);
  CHECK(r.model.allocations == r.snapshot.actions.at("alloc"));
  CHECK(r.model.placed_as_recorded == r.model.allocations);
  CHECK_FALSE(r.model.first_misplaced);
  CHECK_FALSE(r.model.first_reserved_mismatch);
  CHECK(r.model.segments_kept == 0);
  CHECK(r.model.differences.empty());
}

}  // namespace

TEST_CASE("the caching-allocator model replays PyTorch 2.11's allocator on an H200 to the byte",
          "[importers][snapshot][real]") {
  // GPT block stacks (bf16, SDPA, AdamW: plain, with save_on_cpu, checkpointed), Hugging Face's
  // GPT-2 and torchvision's ResNet-50 (fp16 autocast, a GradScaler): every allocation at the
  // address PyTorch gave it, the reserved bytes after every event, and at the dump the reserved
  // and allocated bytes and the segments. The model starts from the segments and blocks as they
  // were at the first event (the ring buffer dropped what made them) and places new segments
  // where cudaMalloc did (which orders equal blocks as c10 does: lowest address first).
  for (const char* name : {"gpt_blocks", "gpt_offloaded", "gpt_checkpointed", "gpt2", "resnet50"}) {
    CAPTURE(name);
    check_replayed_exactly(replay(std::filesystem::path(MEMPLAN_SOURCE_DIR) / "traces/kineto-h200" /
                                  (std::string(name) + ".snapshot.pickle.gz")));
  }
}

TEST_CASE("the caching-allocator model replays the shared Transformer step's snapshot to the byte",
          "[importers][snapshot][real]") {
  // 1.97 GiB of its 6.74 GiB were in cached free segments at the first event: the model starts
  // from them, and the 6,526 allocations land where PyTorch put them.
  const auto path = std::filesystem::path(MEMPLAN_SOURCE_DIR) /
                    "../shared/data/memory-snapshots/transformer_lm_training_step.pickle";
  if (!std::filesystem::exists(path)) {
    WARN(path.string() << " is not present (../shared beside the repository): skipped");
    return;
  }
  const Replayed r = replay(path);
  check_replayed_exactly(r);
  CHECK(r.model.allocations == 6526);
  CHECK(r.model.seeded_segments == 377);
}

TEST_CASE("a hand-made history replays through the model as worked out", "[importers][snapshot]") {
  // A 2 MiB small segment at 4096, held before the first event with a 1 KiB block at 8192 in it
  // (the history frees it without allocating it). The history: 1 KiB at 4096, 512 B at 5120
  // (split from the same segment) freed again, then the block at 8192 freed.
  MemorySnapshot s;
  SnapshotSegment segment;
  segment.address = 4096;
  segment.total_size = 2 << 20;
  segment.segment_type = "small";
  segment.blocks = {{4096, 1024, 1024, "active_allocated"},
                    {5120, (2 << 20) - 1024, 0, "inactive"}};
  s.segments = {segment};
  s.device_traces = {{{"alloc", 4096, 1024, 0, {}, {}, {}},
                      {"alloc", 5120, 512, 0, {}, {}, {}},
                      {"free_requested", 5120, 512, 0, {}, {}, {}},
                      {"free_completed", 5120, 512, 0, {}, {}, {}},
                      {"free_requested", 8192, 1024, 0, {}, {}, {}},
                      {"free_completed", 8192, 1024, 0, {}, {}, {}}}};
  const AllocatorReplay r = replay_allocator(s, snapshot_histories(s)[0]);
  // The start: the segment, and the block at 8192 placed at offset 4096 in it. Free then:
  // [4096, 8192) (4 KiB) and [9216, 4096 + 2 MiB). 1 KiB takes the front of the 4 KiB block (best
  // fit: the smallest), at 4096 as recorded; 512 B the rest's front, at 5120 as recorded.
  CHECK(r.seeded_segments == 1);
  CHECK(r.seeded_blocks == 1);
  CHECK(r.allocations == 2);
  CHECK(r.placed_as_recorded == 2);
  CHECK_FALSE(r.first_reserved_mismatch);
  CHECK(r.reserved_at_end == 2 << 20);
  CHECK(r.peak_reserved == 2 << 20);
  CHECK(r.allocated_at_end == 1024);
  CHECK(r.peak_allocated == 2560);  // 1 KiB at 8192 + 1 KiB + 512 B
  CHECK(r.segments_at_end == 1);
  CHECK(r.differences.empty());
}

TEST_CASE("a segment the program gives back is given back by the model", "[importers][snapshot]") {
  // cudaMalloc of 2 MiB at 4096 for a 1 KiB block, the block freed, then torch.cuda.empty_cache
  // (segment_free): nothing is held at the dump. The model makes its segment at 4096 (where
  // cudaMalloc put it) and gives it back at the segment_free.
  MemorySnapshot s;
  s.device_traces = {{{"segment_alloc", 4096, 2 << 20, 0, {}, {}, {}},
                      {"alloc", 4096, 1024, 0, {}, {}, {}},
                      {"free_requested", 4096, 1024, 0, {}, {}, {}},
                      {"free_completed", 4096, 1024, 0, {}, {}, {}},
                      {"segment_free", 4096, 2 << 20, 0, {}, {}, {}}}};
  const AllocatorReplay r = replay_allocator(s, snapshot_histories(s)[0]);
  CHECK(r.seeded_segments == 0);
  CHECK(r.placed_as_recorded == 1);
  CHECK_FALSE(r.first_reserved_mismatch);
  CHECK(r.peak_reserved == 2 << 20);
  CHECK(r.reserved_at_end == 0);
  CHECK(r.segments_at_end == 0);
  CHECK(r.segments_kept == 0);
}

TEST_CASE("an out-of-memory event is checked against the model with the free memory it records",
          "[importers][snapshot]") {
  // 5 MiB takes a 20 MiB segment (a request under 10 MiB takes one of 20) and is split from it:
  // 15 MiB stay cached. c10 then fails 18 MiB with 10 MiB free on the device: no cached block
  // holds 18 MiB and its segment, 18 MiB (10 MiB or more: rounded to 2 MiB), does not fit in 10.
  // The model fails it too. A second `oom`, of 4 MiB with nothing free, is one the model would
  // have served (from the 15 MiB cached): said.
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  MemorySnapshot s;
  SnapshotSegment segment;
  segment.address = 4096;
  segment.total_size = 20 * kMiB;
  segment.segment_type = "large";
  segment.blocks = {{4096, 5 * kMiB, 5 * kMiB, "active_allocated"},
                    {4096 + 5 * kMiB, 15 * kMiB, 0, "inactive"}};
  s.segments = {segment};
  SnapshotEvent oom{"oom", 0, 18 * kMiB, 0, 10 * kMiB, {}, {}};
  SnapshotEvent served{"oom", 0, 4 * kMiB, 0, 0, {}, {}};
  s.device_traces = {{{"segment_alloc", 4096, 20 * kMiB, 0, {}, {}, {}},
                      {"alloc", 4096, 5 * kMiB, 0, {}, {}, {}},
                      oom,
                      served}};
  const AllocatorReplay r = replay_allocator(s, snapshot_histories(s)[0]);
  CHECK(r.placed_as_recorded == 1);
  CHECK_FALSE(r.first_reserved_mismatch);
  CHECK(r.ooms == 2);
  CHECK(r.ooms_reproduced == 1);
  CHECK(r.first_oom_served == std::optional<std::size_t>(3));
}

TEST_CASE("expandable segments replay as worked out, whole or with the ring buffer's start lost",
          "[importers][snapshot][expandable]") {
  // expandable_segments:True, the large pool's address space at B. As c10 writes it: 3 MiB maps
  // the first 20 MiB page and takes [0, 3) MiB; 25 MiB maps the next page, [20, 40), and takes the
  // free [3, 20) with it, [3, 28); the 3 MiB block is freed; 10 MiB takes the free [28, 40) (the
  // smallest that holds it, where the 3 MiB block does not); the 25 MiB block is freed, [0, 28)
  // free; empty_cache unmaps the one page wholly free, [0, 20). At the dump one run of mapped
  // pages, [20, 40), with the 10 MiB block at 28 MiB.
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  constexpr std::int64_t kB = std::int64_t{1} << 40;
  MemorySnapshot s;
  s.settings = AllocatorSettings{};
  s.settings->expandable_segments = true;
  SnapshotSegment run;
  run.address = kB + 20 * kMiB;
  run.total_size = 20 * kMiB;
  run.segment_type = "large";
  run.expandable = true;
  run.blocks = {{kB + 20 * kMiB, 8 * kMiB, 0, "inactive"},
                {kB + 28 * kMiB, 10 * kMiB, 10 * kMiB, "active_allocated"},
                {kB + 38 * kMiB, 2 * kMiB, 0, "inactive"}};
  s.segments = {run};
  const std::vector<SnapshotEvent> events = {
      {"segment_map", kB, 20 * kMiB, 0, {}, {}, {}},
      {"alloc", kB, 3 * kMiB, 0, {}, {}, {}},
      {"segment_map", kB + 20 * kMiB, 20 * kMiB, 0, {}, {}, {}},
      {"alloc", kB + 3 * kMiB, 25 * kMiB, 0, {}, {}, {}},
      {"free_requested", kB, 3 * kMiB, 0, {}, {}, {}},
      {"free_completed", kB, 3 * kMiB, 0, {}, {}, {}},
      {"alloc", kB + 28 * kMiB, 10 * kMiB, 0, {}, {}, {}},
      {"free_requested", kB + 3 * kMiB, 25 * kMiB, 0, {}, {}, {}},
      {"free_completed", kB + 3 * kMiB, 25 * kMiB, 0, {}, {}, {}},
      {"segment_unmap", kB, 20 * kMiB, 0, {}, {}, {}}};
  SECTION("every event") {
    // Nothing mapped at the first event; the model's address space starts at B (the lowest
    // address the events and the dump show for it) and maps, places and unmaps as c10 did.
    s.device_traces = {events};
    const AllocatorReplay r = replay_allocator(s, snapshot_histories(s)[0]);
    CHECK(r.seeded_segments == 0);
    CHECK(r.allocations == 3);
    CHECK(r.placed_as_recorded == 3);
    CHECK_FALSE(r.first_reserved_mismatch);
    CHECK(r.peak_reserved == 40 * kMiB);
    CHECK(r.reserved_at_end == 20 * kMiB);
    CHECK(r.allocated_at_end == 10 * kMiB);
    CHECK(r.segments_at_end == 1);
    CHECK(r.segments_kept == 0);
    CHECK(r.differences.empty());
  }
  SECTION("the ring buffer lost the first four") {
    // At the first event: [20, 40) mapped (the dump's run) and [0, 20) (unmapped later), one run
    // [0, 40); the 3 MiB block (freed, never allocated in the events) and the 25 MiB one live.
    s.device_traces = {std::vector<SnapshotEvent>(events.begin() + 4, events.end())};
    const AllocatorReplay r = replay_allocator(s, snapshot_histories(s)[0]);
    CHECK(r.seeded_segments == 1);
    CHECK(r.seeded_blocks == 2);
    CHECK(r.allocations == 1);
    CHECK(r.placed_as_recorded == 1);
    CHECK_FALSE(r.first_reserved_mismatch);
    CHECK(r.reserved_at_end == 20 * kMiB);
    CHECK(r.segments_at_end == 1);
    CHECK(r.segments_kept == 0);
  }
}
