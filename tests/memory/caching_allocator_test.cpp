// The caching allocator model against PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp, default
// configuration), each expected figure worked out from them in the comments.
#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "memory/caching_allocator.hpp"
#include "memory/device_arena.hpp"

using memplan::sim::CachingAllocator;
using memplan::sim::DeviceArena;
using Offset = CachingAllocator::Offset;

namespace {
constexpr CachingAllocator::Size kMiB = CachingAllocator::Size{1} << 20;
}  // namespace

TEST_CASE("segment sizes follow PyTorch's: 2 MiB, 20 MiB, or the request in 2 MiB steps",
          "[sim][caching]") {
  CHECK(CachingAllocator::rounded_size(0) == 512);
  CHECK(CachingAllocator::rounded_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(512) == 2 * kMiB);
  CHECK(CachingAllocator::segment_size(kMiB) == 2 * kMiB);         // the largest small request
  CHECK(CachingAllocator::segment_size(kMiB + 512) == 20 * kMiB);  // large, under 10 MiB
  CHECK(CachingAllocator::segment_size(10 * kMiB - 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB) == 10 * kMiB);  // from 10 MiB: rounded
  CHECK(CachingAllocator::segment_size(10 * kMiB + 512) == 12 * kMiB);
}

TEST_CASE("small requests share a 2 MiB segment, the first takes its front", "[sim][caching]") {
  CachingAllocator memory(100 * kMiB);
  // 1000 bytes round to 1024: a new 2 MiB segment, split (the rest, 2 MiB - 1024, is >= 512).
  const auto a = memory.allocate(1000);
  REQUIRE(a);
  CHECK(a->segment == 0);
  CHECK(a->offset == 0);
  CHECK(memory.segment_created() == 0);
  // The next one is the rest's best fit: the same segment, right after the first.
  const auto b = memory.allocate(1000);
  REQUIRE(b);
  CHECK(b->segment == 0);
  CHECK(b->offset == 1024);
  CHECK_FALSE(memory.segment_created());
  CHECK(memory.reserved_bytes() == 2 * kMiB);
  CHECK(memory.live_bytes() == 2048);
  CHECK(memory.segment_count() == 1);
}

TEST_CASE("a large request under 10 MiB splits a 20 MiB segment, a rest of 1 MiB is not split",
          "[sim][caching]") {
  CachingAllocator memory(100 * kMiB);
  // 3 MiB: a 20 MiB segment, split (the rest, 17 MiB, is more than 1 MiB).
  const auto a = memory.allocate(3 * kMiB);
  // 5 MiB: the cached 17 MiB block, at 3 MiB in segment 0; 12 MiB stay cached.
  const auto b = memory.allocate(5 * kMiB);
  REQUIRE((a && b));
  CHECK(b->segment == 0);
  CHECK(b->offset == 3 * kMiB);
  // 13 MiB: no cached block is large enough (12 MiB); a segment of 14 MiB (13 MiB rounded up to
  // 2 MiB), whose rest of 1 MiB is not more than 1 MiB: the block is the whole 14 MiB.
  const auto c = memory.allocate(13 * kMiB);
  REQUIRE(c);
  CHECK(c->segment == 1);
  CHECK(memory.segment_bytes(1) == 14 * kMiB);
  CHECK(memory.live_bytes() == (3 + 5 + 14) * kMiB);
  CHECK(memory.reserved_bytes() == (20 + 14) * kMiB);
  // A 12 MiB request takes the cached 12 MiB exactly, in segment 0.
  const auto d = memory.allocate(12 * kMiB);
  REQUIRE(d);
  CHECK(d->segment == 0);
  CHECK(d->offset == 8 * kMiB);
  CHECK(memory.reserved_bytes() == 34 * kMiB);
}

TEST_CASE("released blocks merge with their free neighbours in the segment", "[sim][caching]") {
  CachingAllocator memory(100 * kMiB);
  const auto a = memory.allocate(3 * kMiB);  // [0, 3) of a 20 MiB segment
  const auto b = memory.allocate(5 * kMiB);  // [3, 8); [8, 20) cached
  REQUIRE((a && b));
  memory.release(a->handle);
  memory.release(b->handle);  // merges with [0, 3) before and [8, 20) after: the whole segment
  // 19 MiB: the merged 20 MiB block is the best fit; the rest, 1 MiB, is not split off.
  const auto c = memory.allocate(19 * kMiB);
  REQUIRE(c);
  CHECK(c->segment == 0);
  CHECK(c->offset == 0);
  CHECK_FALSE(memory.segment_created());
  CHECK(memory.live_bytes() == 20 * kMiB);
}

TEST_CASE("cached segments are given back when a new one would not fit, the arena runs out",
          "[sim][caching]") {
  // 12 MiB and 16 MiB each take a segment of their size (28 MiB of 40); the first is released,
  // its segment cached. 14 MiB: no cached block is large enough, and 28 + 14 > 40, so the cached
  // 12 MiB segment goes back to the driver and 16 + 14 = 30 fits.
  CachingAllocator memory(40 * kMiB);
  const auto a = memory.allocate(12 * kMiB);
  const auto b = memory.allocate(16 * kMiB);
  REQUIRE((a && b));
  memory.release(a->handle);
  CHECK(memory.reserved_bytes() == 28 * kMiB);
  CHECK(memory.largest_free_block() == 24 * kMiB);  // 40 - 28 + the cached 12 MiB segment
  const auto c = memory.allocate(14 * kMiB);
  REQUIRE(c);
  CHECK(memory.segments_released() == std::vector<CachingAllocator::Segment>{a->segment});
  CHECK(memory.segment_created() == c->segment);
  CHECK(memory.reserved_bytes() == 30 * kMiB);
  CHECK(memory.peak_reserved_bytes() == 30 * kMiB);

  // The same calls on one contiguous arena of 40 MiB: 12 MiB at 0, 16 MiB at 12; freeing the
  // first leaves a 12 MiB hole and 12 MiB above 28, and 14 MiB fits in neither.
  DeviceArena arena(40 * kMiB);
  const auto x = arena.allocate(12 * kMiB);
  REQUIRE(arena.allocate(16 * kMiB));
  arena.release(*x);
  CHECK_FALSE(arena.allocate(14 * kMiB));
}

TEST_CASE("out of memory when the live segments leave no room for a new one", "[sim][caching]") {
  // 12 + 16 MiB live of 30; 4 MiB asks for a 20 MiB segment, and nothing is cached to give back.
  CachingAllocator memory(30 * kMiB);
  REQUIRE(memory.allocate(12 * kMiB));
  REQUIRE(memory.allocate(16 * kMiB));
  CHECK_FALSE(memory.allocate(4 * kMiB));
  CHECK(memory.segments_released().empty());
  CHECK(memory.reserved_bytes() == 28 * kMiB);
  CHECK(memory.largest_free_block() == 2 * kMiB);
}

TEST_CASE("random allocations and releases keep blocks apart, inside segments and the capacity",
          "[sim][caching][property]") {
  for (const std::uint32_t seed : {1U, 2U, 3U, 4U, 5U}) {
    std::mt19937 rng(seed);
    const CachingAllocator::Size capacity = 256 * kMiB;
    CachingAllocator memory(capacity);
    struct Live {
      CachingAllocator::Placed place;
      CachingAllocator::Size size;
    };
    std::vector<Live> live;
    std::map<CachingAllocator::Segment, CachingAllocator::Size> segments;
    std::uniform_int_distribution<int> kind(0, 9);
    for (int step = 0; step < 3000; ++step) {
      if (!live.empty() && kind(rng) < 4) {
        const auto i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
        memory.release(live[i].place.handle);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      // Sizes from bytes to tens of MiB: both pools and every segment rule.
      const int magnitude = std::uniform_int_distribution<int>(8, 25)(rng);
      const CachingAllocator::Size bytes = std::uniform_int_distribution<CachingAllocator::Size>(
          1, CachingAllocator::Size{1} << magnitude)(rng);
      const auto placed = memory.allocate(bytes);
      for (const auto s : memory.segments_released()) {
        for (const Live& l : live) REQUIRE(l.place.segment != s);  // only empty segments go
        segments.erase(s);
      }
      if (const auto s = memory.segment_created()) segments[*s] = memory.segment_bytes(*s);
      if (!placed) {
        // PyTorch's OOM: the segments still held leave no room for the request's segment.
        CHECK(memory.reserved_bytes() +
                  CachingAllocator::segment_size(CachingAllocator::rounded_size(bytes)) >
              capacity);
        continue;
      }
      REQUIRE(segments.count(placed->segment) == 1);
      const CachingAllocator::Size size = CachingAllocator::rounded_size(bytes);
      CHECK(placed->offset + size <= segments[placed->segment]);
      for (const Live& l : live) {
        if (l.place.segment != placed->segment) continue;
        const bool apart =
            placed->offset + size <= l.place.offset || l.place.offset + l.size <= placed->offset;
        REQUIRE(apart);
      }
      live.push_back({*placed, size});
      CachingAllocator::Size reserved = 0;
      for (const auto& [s, b] : segments) reserved += b;
      CHECK(reserved == memory.reserved_bytes());
      CHECK(reserved <= capacity);
    }
  }
}

TEST_CASE("a refused request's shortfall is what its new segment lacks, never negative",
          "[sim][caching]") {
  // 1 MiB and 768 KiB share a 2 MiB small segment (256 KiB cached after them); 4 MiB takes a
  // 20 MiB segment (16 MiB cached after it, in the large pool). 22 MiB of 23 are held by
  // segments with live blocks.
  CachingAllocator memory(23 * kMiB);
  REQUIRE(memory.allocate(kMiB));
  REQUIRE(memory.allocate(3 * kMiB / 4));
  REQUIRE(memory.allocate(4 * kMiB));
  // 1 MiB is a small request: the small pool's largest block is 256 KiB, and the large pool's
  // 16 MiB does not serve it; its new 2 MiB segment has 1 MiB: 1 MiB missing. (The largest free
  // block, 16 MiB, would say -15 MiB.)
  CHECK_FALSE(memory.allocate(kMiB));
  const auto small = memory.shortfall(kMiB);
  CHECK(small.requested == kMiB);
  CHECK(small.small_pool);
  CHECK(small.largest_cached == kMiB / 4);
  CHECK(small.largest_cached_other == 16 * kMiB);
  CHECK(small.segment_bytes == 2 * kMiB);
  CHECK(small.free_for_segments == kMiB);
  CHECK(small.missing == kMiB);
  CHECK(memory.largest_free_block() == 16 * kMiB);
  // 17 MiB is large: no cached block holds it, and its own 18 MiB segment has 1 MiB.
  CHECK_FALSE(memory.allocate(17 * kMiB));
  CHECK(memory.shortfall(17 * kMiB).missing == 17 * kMiB);
  // 2 MiB comes from the large pool's 16 MiB block: nothing missing.
  CHECK(memory.shortfall(2 * kMiB).missing == 0);
  CHECK(memory.allocate(2 * kMiB));
}

TEST_CASE("roundup_power2_divisions rounds a request up to the next division of its power of two",
          "[sim][caching][settings]") {
  CachingAllocator::Settings settings;
  settings.roundup_power2_divisions[0] = 4;  // requests under 2 MiB: [1 MiB, 2 MiB) in quarters
  settings.roundup_power2_divisions[2] = 2;  // [4 MiB, 8 MiB) in halves
  const CachingAllocator memory(100 * kMiB, settings);
  // 1,200,000 B is in [1 MiB, 2 MiB): steps of 1 MiB / 4 = 262,144 B from 1 MiB; the next one up
  // is 1 MiB + 262,144 = 1,310,720.
  CHECK(memory.request_size(1200000) == 1310720);
  // 5 MiB: steps of 2 MiB from 4 MiB: 6 MiB.
  CHECK(memory.request_size(5 * kMiB) == 6 * kMiB);
  CHECK(memory.request_size(4 * kMiB) == 4 * kMiB);            // a power of two stays
  CHECK(memory.request_size(2 * kMiB + 1) == 2 * kMiB + 512);  // [2 MiB, 4 MiB): no divisions
  CHECK(memory.request_size(600) == 1024);  // not above 512 x 4: 512-byte rounding
  CHECK(CachingAllocator(100 * kMiB).request_size(1200000) == 1200128);  // the default
}

TEST_CASE("max_split_size keeps oversize blocks whole and away from smaller requests",
          "[sim][caching][settings]") {
  CachingAllocator::Settings settings;
  settings.max_split_size = 8 * kMiB;
  CachingAllocator memory(1024 * kMiB, settings);
  // A 30 MiB block and a 40 MiB one, cached.
  const auto thirty = memory.allocate(30 * kMiB);
  const auto forty = memory.allocate(40 * kMiB);
  REQUIRE((thirty && forty));
  memory.release(thirty->handle);
  memory.release(forty->handle);
  // 16 MiB (over it) takes a cached block only under 16 + 20 MiB: the 30 MiB one, whole.
  const auto first = memory.allocate(16 * kMiB);
  REQUIRE(first);
  CHECK_FALSE(memory.segment_created());
  CHECK(first->segment == thirty->segment);
  CHECK(first->size == 30 * kMiB);
  // Another: the 40 MiB block is 20 MiB or more larger than 16 MiB: a new 16 MiB segment.
  const auto second = memory.allocate(16 * kMiB);
  REQUIRE(second);
  CHECK(memory.segment_created());
  CHECK(second->size == 16 * kMiB);
  // 2 MiB (under max_split_size) may not take an oversize block: a new 20 MiB segment, split.
  const auto two = memory.allocate(2 * kMiB);
  REQUIRE(two);
  CHECK(memory.segment_created());
  CHECK(two->size == 2 * kMiB);
  CHECK(memory.reserved_bytes() == (30 + 40 + 16 + 20) * kMiB);
}

TEST_CASE("a block serves its own stream's requests only", "[sim][caching][streams]") {
  CachingAllocator memory(100 * kMiB);
  const auto side = memory.allocate(1000, 1);
  REQUIRE(side);
  memory.release(side->handle);
  // Stream 0 does not take stream 1's cached 2 MiB: a segment of its own.
  const auto compute = memory.allocate(1000, 0);
  REQUIRE(compute);
  CHECK(compute->segment != side->segment);
  CHECK(memory.segment_count() == 2);
  // Stream 1 takes its own again.
  const auto again = memory.allocate(1000, 1);
  REQUIRE(again);
  CHECK(again->segment == side->segment);
}

TEST_CASE("a replay starts from given segments and blocks and gives segments back as recorded",
          "[sim][caching][replay]") {
  CachingAllocator memory(1024 * kMiB);
  const auto added = memory.add_segment(Offset{1} << 30, 20 * kMiB, false, 0);
  REQUIRE(added);
  const auto s = *added;
  CHECK(memory.segment_address(s) == Offset{1} << 30);
  CHECK_FALSE(memory.add_segment(Offset{2} << 30, 1024 * kMiB, false, 0));  // past the capacity
  CHECK(memory.reserved_bytes() == 20 * kMiB);
  // A 2 MiB block at 4 MiB: the free blocks are [0, 4 MiB) and [6 MiB, 20 MiB).
  const auto placed = memory.place(s, 4 * kMiB, 2 * kMiB);
  REQUIRE(placed);
  CHECK(memory.live_bytes() == 2 * kMiB);
  CHECK_FALSE(memory.place(s, 5 * kMiB, kMiB));  // inside the live block
  // 3 MiB: best fit is the 4 MiB front; its 1 MiB rest is not split (not more than 1 MiB).
  const auto front = memory.allocate(3 * kMiB);
  REQUIRE(front);
  CHECK(front->segment == s);
  CHECK(front->offset == 0);
  CHECK(front->size == 4 * kMiB);
  CHECK_FALSE(memory.release_segment(s));  // blocks of it are live
  memory.release(front->handle);
  memory.release(*placed);
  CHECK(memory.release_segment(s));
  CHECK(memory.reserved_bytes() == 0);
  CHECK(memory.segment_count() == 0);
  // A new segment goes where cudaMalloc put it, when given; else after the highest so far.
  const auto at = memory.allocate(25 * kMiB, 0, Offset{5} << 30);
  REQUIRE(at);
  CHECK(memory.segment_address(at->segment) == Offset{5} << 30);
  const auto after = memory.allocate(25 * kMiB);
  REQUIRE(after);
  CHECK(memory.segment_address(after->segment) == (Offset{5} << 30) + 26 * kMiB);
}

namespace {
CachingAllocator expandable(CachingAllocator::Size capacity) {
  CachingAllocator::Settings settings;
  settings.expandable_segments = true;
  return CachingAllocator(capacity, settings);
}
}  // namespace

TEST_CASE("expandable segments: one segment per pool grows by 20 MiB pages into its free tail",
          "[sim][caching][expandable]") {
  // 100 MiB: the large pool's segment reserves 1 1/8 of it in 20 MiB pages, 6 (120 MiB).
  CachingAllocator memory = expandable(100 * kMiB);
  // 3 MiB: a new segment, its first page mapped; split (a rest of 512 bytes or more is split in
  // either pool here), 17 MiB cached after it.
  const auto a = memory.allocate(3 * kMiB);
  REQUIRE(a);
  CHECK(a->offset == 0);
  CHECK(memory.segment_bytes(a->segment) == 120 * kMiB);
  CHECK_FALSE(memory.segment_created());  // no cudaMalloc
  CHECK(memory.reserved_bytes() == 20 * kMiB);
  using Change = CachingAllocator::PageChange;
  const auto changes = [&] {
    std::vector<std::tuple<std::int64_t, std::int64_t, bool>> out;
    for (const Change& c : memory.pages_changed()) {
      CHECK(c.segment == a->segment);
      out.emplace_back(c.offset, c.bytes, c.mapped);
    }
    return out;
  };
  CHECK(changes() ==
        std::vector<std::tuple<std::int64_t, std::int64_t, bool>>{{0, 20 * kMiB, true}});
  // 25 MiB: no cached block holds it; the free 17 MiB at 3 MiB and the unmapped pages after it
  // do: one more page is mapped ([20, 40) MiB) and merges with it, the block is [3, 28) MiB and
  // 12 MiB stay cached. (Without expandable segments: a new segment of 26 MiB, 46 MiB reserved.)
  const auto b = memory.allocate(25 * kMiB);
  REQUIRE(b);
  CHECK(b->segment == a->segment);
  CHECK(b->offset == 3 * kMiB);
  CHECK(memory.reserved_bytes() == 40 * kMiB);
  CHECK(memory.segment_count() == 1);
  CHECK(changes() ==
        std::vector<std::tuple<std::int64_t, std::int64_t, bool>>{{20 * kMiB, 20 * kMiB, true}});
  // 1 MiB + 512 (large): best fit is the cached 12 MiB; its rest is split off however small.
  const auto c = memory.allocate(kMiB + 512);
  REQUIRE(c);
  CHECK(c->offset == 28 * kMiB);
  CHECK(c->size == kMiB + 512);
  CHECK(changes().empty());  // a cached block: no page
}

TEST_CASE("expandable segments: best fit takes a block that fits before the growable tail",
          "[sim][caching][expandable]") {
  CachingAllocator memory = expandable(100 * kMiB);
  // 15 MiB at [0, 15) MiB of the first page; 13 MiB: the free 5 MiB at 15 MiB and one more page,
  // [15, 28) MiB, 12 MiB cached at [28, 40) with the unmapped pages after it.
  const auto a = memory.allocate(15 * kMiB);
  const auto b = memory.allocate(13 * kMiB);
  REQUIRE((a && b));
  CHECK(b->offset == 15 * kMiB);
  memory.release(a->handle);  // cached: [0, 15) MiB
  // 10 MiB: the smallest cached block that holds it is the 12 MiB tail, but the tail counts as
  // large as it can grow (12 + 80 MiB); the 15 MiB block at 0 counts as 15 and is taken.
  const auto c = memory.allocate(10 * kMiB);
  REQUIRE(c);
  CHECK(c->offset == 0);
  CHECK(memory.reserved_bytes() == 40 * kMiB);
}

TEST_CASE("expandable segments: out of memory unmaps the free pages and maps them where needed",
          "[sim][caching][expandable]") {
  // 60 MiB: 4 pages of address space (67.5 MiB rounded up to 20 MiB pages).
  CachingAllocator memory = expandable(60 * kMiB);
  const auto a = memory.allocate(30 * kMiB);  // pages [0, 40) MiB; [30, 40) cached
  const auto b = memory.allocate(15 * kMiB);  // + page [40, 60): b is [30, 45), [45, 60) cached
  REQUIRE((a && b));
  CHECK(b->offset == 30 * kMiB);
  CHECK(memory.reserved_bytes() == 60 * kMiB);
  memory.release(a->handle);  // cached: [0, 30) and [45, 60)
  // 35 MiB: [45, 60) and the last page [60, 80) hold it, but a fourth page passes 60 MiB. The
  // whole free pages are unmapped ([0, 20); [20, 40) and [40, 60) hold parts of b) and the
  // request is tried again: [0, 20) with the free [20, 30) is too small, page [60, 80) is mapped.
  const auto c = memory.allocate(35 * kMiB);
  REQUIRE(c);
  // In order: [0, 20) unmapped, then [60, 80) mapped.
  const auto& changes = memory.pages_changed();
  REQUIRE(changes.size() == 2);
  CHECK((changes[0].offset == 0 && changes[0].bytes == 20 * kMiB && !changes[0].mapped));
  CHECK((changes[1].offset == 60 * kMiB && changes[1].bytes == 20 * kMiB && changes[1].mapped));
  CHECK(c->offset == 45 * kMiB);
  CHECK(c->size == 35 * kMiB);
  CHECK(memory.reserved_bytes() == 60 * kMiB);
  CHECK(memory.peak_reserved_bytes() == 60 * kMiB);
  CHECK(memory.segment_count() == 1);  // mapped: [20, 80) MiB, one run
  // Now nothing is free but [20, 30): 11 MiB fails, the segment has no room left for it.
  CHECK_FALSE(memory.allocate(11 * kMiB));
}

TEST_CASE("expandable segments in a replay: pages mapped and unmapped as recorded",
          "[sim][caching][expandable][replay]") {
  CachingAllocator memory = expandable(1024 * kMiB);
  const auto s = memory.add_expandable_segment(Offset{1} << 40, false, 0);
  CHECK(memory.segment_address(s) == Offset{1} << 40);
  CHECK(memory.expandable_segment_holding((Offset{1} << 40) + 5 * kMiB) == s);
  CHECK_FALSE(memory.expandable_segment_holding(5 * kMiB));
  CHECK(memory.map(s, 0, 40 * kMiB));
  CHECK_FALSE(memory.map(s, 20 * kMiB, 20 * kMiB));  // mapped already
  CHECK_FALSE(memory.map(s, 50 * kMiB, 20 * kMiB));  // not on a page
  CHECK(memory.reserved_bytes() == 40 * kMiB);
  const auto live = memory.place(s, 0, 10 * kMiB);
  REQUIRE(live);
  // Unmapping [0, 40): the page [0, 20) holds the live block and stays.
  CHECK(memory.unmap(s, 0, 40 * kMiB) == 20 * kMiB);
  CHECK(memory.reserved_bytes() == 20 * kMiB);
  CHECK(memory.segment_count() == 1);
  CHECK(memory.map(s, 60 * kMiB, 20 * kMiB));
  CHECK(memory.segment_count() == 2);  // [0, 20) and [60, 80): two runs, two segments
  // 15 MiB: best fit is the 20 MiB at 60 (the 10 MiB at 10 is too small).
  const auto next = memory.allocate(15 * kMiB);
  REQUIRE(next);
  CHECK(next->offset == 60 * kMiB);
}

TEST_CASE("garbage collection gives back the cached segments idle longest, past its threshold",
          "[sim][caching][gc]") {
  CachingAllocator::Settings settings;
  settings.garbage_collection_threshold = 0.5;  // of 200 MiB: 100 MiB
  CachingAllocator memory(200 * kMiB, settings);
  // Requests to the large pool count the ages: a (1st) and b (2nd) take segments of 30 and
  // 24 MiB; a is cached after the 2nd request, x (3rd, 40 MiB: a segment, 94 MiB reserved), b
  // cached after the 3rd, y (4th, 50 MiB: 144 MiB reserved), x cached after the 4th.
  const auto a = memory.allocate(30 * kMiB);
  const auto b = memory.allocate(24 * kMiB);
  REQUIRE((a && b));
  memory.release(a->handle);
  const auto x = memory.allocate(40 * kMiB);
  REQUIRE(x);
  CHECK(memory.segments_released().empty());  // 54 MiB reserved: under the threshold
  memory.release(b->handle);
  const auto y = memory.allocate(50 * kMiB);
  REQUIRE(y);
  CHECK(memory.segments_released().empty());  // 94 MiB: under it
  memory.release(x->handle);
  CHECK(memory.reserved_bytes() == 144 * kMiB);
  // z (5th, 60 MiB), served by no cached block: 44 MiB over the threshold. Ages: b 5 - 3 = 2,
  // a 5 - 2 = 3, x 5 - 4 = 1; average 2. In the pool's order (by size): b (24 MiB, 2 >= 2) and
  // a (30 MiB, 3 >= 2) are given back, 54 MiB; x (1 < 2) stays. Then z's segment: 150 MiB.
  // (Without collection: 204 MiB would pass the capacity, all three go, 170 MiB.)
  const auto z = memory.allocate(60 * kMiB);
  REQUIRE(z);
  CHECK(memory.segments_released() == std::vector{b->segment, a->segment});
  CHECK(memory.reserved_bytes() == 150 * kMiB);
  CHECK(memory.segment_count() == 3);
}

TEST_CASE("random requests with expandable segments keep blocks apart, in the mapped capacity",
          "[sim][caching][expandable][property]") {
  for (const std::uint32_t seed : {1U, 2U, 3U, 4U, 5U}) {
    std::mt19937 rng(seed);
    const CachingAllocator::Size capacity = 256 * kMiB;
    CachingAllocator memory = expandable(capacity);
    std::vector<CachingAllocator::Placed> live;
    std::uniform_int_distribution<int> kind(0, 9);
    std::size_t refused = 0;
    for (int step = 0; step < 3000; ++step) {
      if (!live.empty() && kind(rng) < 4) {
        const auto i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
        memory.release(live[i].handle);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const int magnitude = std::uniform_int_distribution<int>(8, 25)(rng);
      const auto placed = memory.allocate(std::uniform_int_distribution<CachingAllocator::Size>(
          1, CachingAllocator::Size{1} << magnitude)(rng));
      CHECK(memory.reserved_bytes() <= capacity);
      CHECK(memory.reserved_bytes() % (2 * kMiB) == 0);  // whole pages
      if (!placed) {
        ++refused;
        continue;
      }
      CHECK(placed->offset + placed->size <= memory.segment_bytes(placed->segment));
      for (const CachingAllocator::Placed& l : live) {
        if (l.segment != placed->segment) continue;
        REQUIRE((placed->offset + placed->size <= l.offset || l.offset + l.size <= placed->offset));
      }
      live.push_back(*placed);
      CHECK(memory.live_bytes() <= memory.reserved_bytes());
    }
    CHECK(refused > 0);  // the capacity was reached: unmapping was exercised
    for (const CachingAllocator::Placed& l : live) memory.release(l.handle);
    CHECK(memory.live_bytes() == 0);
  }
}
