#include <algorithm>
#include <map>
#include <random>

#include <catch2/catch.hpp>

#include "sim/device_arena.hpp"

using memplan::sim::DeviceArena;

TEST_CASE("sizes are rounded up to 512 bytes and blocks are handed out from offset 0",
          "[sim][arena]") {
  DeviceArena arena(4096);
  CHECK(DeviceArena::aligned_size(0) == 512);
  CHECK(DeviceArena::aligned_size(1) == 512);
  CHECK(DeviceArena::aligned_size(512) == 512);
  CHECK(DeviceArena::aligned_size(513) == 1024);
  CHECK(arena.allocate(1) == 0);
  CHECK(arena.allocate(600) == 512);
  CHECK(arena.live_bytes() == 1536);
  CHECK(arena.reserved_bytes() == 1536);
  CHECK(arena.largest_free_block() == 4096 - 1536);
}

TEST_CASE("best fit takes the smallest free block that is large enough", "[sim][arena]") {
  DeviceArena arena(8192);
  const auto a = *arena.allocate(1024);  // [0, 1024)
  const auto b = *arena.allocate(512);   // [1024, 1536)
  const auto c = *arena.allocate(2048);  // [1536, 3584)
  const auto d = *arena.allocate(512);   // [3584, 4096)
  CHECK(a == 0);
  CHECK(c == 1536);
  arena.release(a);
  arena.release(c);
  // Holes: 1024 at 0, 2048 at 1536, 4096 at 4096. A 1000-byte request fits all three; best fit
  // takes the 1024-byte hole.
  CHECK(arena.allocate(1000) == 0);
  CHECK(arena.allocate(1500) == 1536);
  CHECK(arena.allocate(3000) == 4096);
  (void)b;
  (void)d;
}

TEST_CASE("released neighbours coalesce into one block", "[sim][arena]") {
  DeviceArena arena(4096);
  const auto a = *arena.allocate(1024);
  const auto b = *arena.allocate(1024);
  const auto c = *arena.allocate(1024);
  arena.release(a);
  arena.release(c);
  CHECK(arena.free_block_count() == 2);  // [0,1024) and [2048,4096)
  CHECK(arena.largest_free_block() == 2048);
  arena.release(b);
  CHECK(arena.free_block_count() == 1);
  CHECK(arena.largest_free_block() == 4096);
  CHECK(arena.live_bytes() == 0);
  CHECK(arena.reserved_bytes() == 0);
  CHECK(arena.peak_live_bytes() == 3072);
  CHECK(arena.peak_reserved_bytes() == 3072);
}

TEST_CASE("an allocation that finds no block fails and changes nothing", "[sim][arena]") {
  DeviceArena arena(2048);
  const auto a = *arena.allocate(512);
  const auto b = *arena.allocate(512);
  *arena.allocate(512);
  arena.release(a);
  // 1024 bytes are free, in two 512-byte blocks: fragmentation.
  CHECK(arena.capacity() - arena.live_bytes() == 1024);
  CHECK_FALSE(arena.allocate(1024));
  CHECK(arena.live_bytes() == 1024);
  CHECK(arena.largest_free_block() == 512);
  CHECK_FALSE(arena.allocate(4096));
  (void)b;
}

TEST_CASE("reset forgets everything and the arena can be reused", "[sim][arena]") {
  DeviceArena arena(4096);
  for (int i = 0; i < 8; ++i) CHECK(arena.allocate(512));
  CHECK_FALSE(arena.allocate(1));
  arena.reset(1000);  // capacity is rounded down to the alignment
  CHECK(arena.capacity() == 512);
  CHECK(arena.live_bytes() == 0);
  CHECK(arena.peak_reserved_bytes() == 0);
  CHECK(arena.allocate(512) == 0);
  CHECK_FALSE(arena.allocate(1));
}

TEST_CASE("random allocations match a brute-force best-fit model", "[sim][arena]") {
  constexpr DeviceArena::Size kCapacity = 512 * 256;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    DeviceArena arena(kCapacity);
    std::map<DeviceArena::Offset, DeviceArena::Size> model;  // allocated blocks
    DeviceArena::Size peak_end = 0;
    for (int step = 0; step < 2000; ++step) {
      if (model.empty() || rng() % 3 != 0) {
        const auto bytes = static_cast<DeviceArena::Size>(rng() % (512 * 24)) + 1;
        const auto size = DeviceArena::aligned_size(bytes);
        // The model's best fit: scan the gaps between allocated blocks.
        DeviceArena::Offset best = -1;
        DeviceArena::Size best_size = 0;
        DeviceArena::Size largest = 0;
        DeviceArena::Offset cursor = 0;
        auto consider = [&](DeviceArena::Offset start, DeviceArena::Offset end) {
          const auto gap = end - start;
          largest = std::max(largest, gap);
          if (gap >= size && (best < 0 || gap < best_size)) {
            best = start;
            best_size = gap;
          }
        };
        for (const auto& [offset, s] : model) {
          if (offset > cursor) consider(cursor, offset);
          cursor = offset + s;
        }
        if (kCapacity > cursor) consider(cursor, kCapacity);
        REQUIRE(arena.largest_free_block() == largest);
        const auto got = arena.allocate(bytes);
        if (best < 0) {
          REQUIRE_FALSE(got);
        } else {
          REQUIRE(got);
          REQUIRE(*got == best);
          model.emplace(best, size);
          peak_end = std::max(peak_end, best + size);
        }
      } else {
        auto it = model.begin();
        std::advance(it, static_cast<long>(rng() % model.size()));
        arena.release(it->first);
        model.erase(it);
      }
      DeviceArena::Size live = 0;
      for (const auto& [offset, s] : model) live += s;
      REQUIRE(arena.live_bytes() == live);
      REQUIRE(arena.allocation_count() == model.size());
      REQUIRE(arena.reserved_bytes() ==
              (model.empty() ? 0 : model.rbegin()->first + model.rbegin()->second));
      REQUIRE(arena.peak_reserved_bytes() == peak_end);
    }
  }
}
