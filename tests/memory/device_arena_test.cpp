#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "memory/device_arena.hpp"

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
        // The top gap (above the highest block) only when no gap below fits (Note [Arena top
        // block]); it counts for the largest free block all the same.
        if (kCapacity > cursor) {
          largest = std::max(largest, kCapacity - cursor);
          if (best < 0 && kCapacity - cursor >= size) best = cursor;
        }
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

namespace {

// The arena as it was before the size-class index (Note [Arena free index]): best fit over an
// ordered set of (size, offset), free blocks by offset for coalescing. Kept here as the reference
// the fast arena must agree with call for call.
class TreeArena {
 public:
  using Size = DeviceArena::Size;
  using Offset = DeviceArena::Offset;
  explicit TreeArena(Size capacity) : capacity_(capacity / 512 * 512) {
    if (capacity_ > 0) insert_free(0, capacity_);
  }
  std::optional<Offset> allocate(Size bytes) {
    const Size size = DeviceArena::aligned_size(bytes);
    // Best fit below the top block; the top block (ending at the capacity) only when nothing
    // below fits (Note [Arena top block]).
    auto fit = by_size_.lower_bound({size, 0});
    while (fit != by_size_.end() && fit->second + fit->first == capacity_) ++fit;
    if (fit == by_size_.end()) {
      fit = by_size_.lower_bound({size, 0});
      while (fit != by_size_.end() && fit->second + fit->first != capacity_) ++fit;
    }
    if (fit == by_size_.end()) return std::nullopt;
    const auto [block_size, offset] = *fit;
    by_size_.erase(fit);
    by_offset_.erase(offset);
    if (block_size > size) insert_free(offset + size, block_size - size);
    allocated_.emplace(offset, size);
    live_ += size;
    peak_reserved_ = std::max(peak_reserved_, offset + size);
    return offset;
  }
  void release(Offset offset) {
    auto it = allocated_.find(offset);
    REQUIRE(it != allocated_.end());
    Offset start = offset;
    Size size = it->second;
    allocated_.erase(it);
    live_ -= size;
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      size += next->second;
      by_size_.erase({next->second, next->first});
      next = by_offset_.erase(next);
    }
    if (next != by_offset_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        by_size_.erase({prev->second, prev->first});
        by_offset_.erase(prev);
      }
    }
    insert_free(start, size);
  }
  Size reserved_bytes() const {
    if (by_offset_.empty()) return capacity_;
    const auto& [offset, size] = *by_offset_.rbegin();
    return offset + size == capacity_ ? offset : capacity_;
  }
  Size largest_free_block() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  std::size_t free_block_count() const { return by_offset_.size(); }
  std::size_t allocation_count() const { return allocated_.size(); }
  Size live_bytes() const { return live_; }
  Size peak_reserved_bytes() const { return peak_reserved_; }
  const std::map<Offset, Size>& allocated() const { return allocated_; }

 private:
  void insert_free(Offset offset, Size size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  Size capacity_;
  std::set<std::pair<Size, Offset>> by_size_;
  std::map<Offset, Size> by_offset_;
  std::map<Offset, Size> allocated_;
  Size live_ = 0;
  Size peak_reserved_ = 0;
};

}  // namespace

TEST_CASE("the size-class arena places every block where the ordered-set arena does",
          "[sim][arena]") {
  // Size mixes: small exact classes, a few repeated sizes (ties broken by offset), sizes spread
  // over many powers of two (class boundaries, the search into higher classes), and requests
  // larger than anything free.
  struct Mix {
    const char* name;
    DeviceArena::Size capacity;
    int steps;
  };
  const Mix mixes[] = {{"small", 512 * 300, 6000},
                       {"repeated", 512 * 4096, 6000},
                       {"spread", DeviceArena::Size{1} << 34, 6000},
                       {"tight", 512 * 1000, 6000}};
  for (const Mix& mix : mixes) {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      CAPTURE(mix.name, seed);
      std::mt19937_64 rng(seed * 7919 + mix.capacity);
      DeviceArena arena(mix.capacity);
      TreeArena reference(mix.capacity);
      // Half the blocks go through allocate/release, half through allocate_block/release_block.
      struct Taken {
        DeviceArena::Offset offset;
        DeviceArena::Handle handle;  // -1: taken with allocate
      };
      std::vector<Taken> handed_out;
      for (int step = 0; step < mix.steps; ++step) {
        const bool take = handed_out.empty() || rng() % 5 < 3;
        if (take) {
          DeviceArena::Size bytes = 0;
          const std::string_view name = mix.name;
          if (name == "small") {
            bytes = static_cast<DeviceArena::Size>(rng() % (512 * 20));
          } else if (name == "repeated") {
            constexpr DeviceArena::Size kSizes[] = {512, 1536, 4096, 40000, 65536, 100000};
            bytes = kSizes[rng() % 6];
          } else if (name == "spread") {
            const auto bits = static_cast<int>(rng() % 30);
            bytes = static_cast<DeviceArena::Size>(rng() % (std::uint64_t{1} << bits)) + 1;
          } else {
            bytes = static_cast<DeviceArena::Size>(rng() % (512 * 64)) + 1;
          }
          const auto want = reference.allocate(bytes);
          if (rng() % 2 == 0) {
            const auto got = arena.allocate(bytes);
            REQUIRE(got == want);
            if (got) handed_out.push_back({*got, -1});
          } else {
            const auto got = arena.allocate_block(bytes);
            REQUIRE(got.has_value() == want.has_value());
            if (got) {
              REQUIRE(got->offset == *want);
              handed_out.push_back({got->offset, got->handle});
            }
          }
        } else {
          const std::size_t k = rng() % handed_out.size();
          if (handed_out[k].handle < 0) {
            arena.release(handed_out[k].offset);
          } else {
            arena.release_block(handed_out[k].handle);
          }
          reference.release(handed_out[k].offset);
          handed_out[k] = handed_out.back();
          handed_out.pop_back();
        }
        REQUIRE(arena.live_bytes() == reference.live_bytes());
        REQUIRE(arena.reserved_bytes() == reference.reserved_bytes());
        REQUIRE(arena.peak_reserved_bytes() == reference.peak_reserved_bytes());
        REQUIRE(arena.largest_free_block() == reference.largest_free_block());
        REQUIRE(arena.free_block_count() == reference.free_block_count());
        REQUIRE(arena.allocation_count() == reference.allocation_count());
      }
      // Releasing everything coalesces back to one block.
      for (const Taken& t : handed_out) {
        if (t.handle < 0) {
          arena.release(t.offset);
        } else {
          arena.release_block(t.handle);
        }
      }
      CHECK(arena.live_bytes() == 0);
      CHECK(arena.free_block_count() == 1);
      CHECK(arena.largest_free_block() == arena.capacity());
    }
  }
}

TEST_CASE("a reused arena starts from a clean state", "[sim][arena]") {
  DeviceArena arena(512 * 64);
  std::vector<DeviceArena::Offset> taken;
  for (int i = 0; i < 20; ++i) taken.push_back(*arena.allocate(512 * (i % 3 + 1)));
  for (std::size_t i = 0; i < taken.size(); i += 2) arena.release(taken[i]);
  arena.reset(512 * 16);
  CHECK(arena.allocation_count() == 0);
  CHECK(arena.free_block_count() == 1);
  CHECK(arena.largest_free_block() == 512 * 16);
  CHECK(arena.reserved_bytes() == 0);
  CHECK(arena.allocate(512 * 16) == 0);
  CHECK(arena.reserved_bytes() == 512 * 16);
  CHECK_FALSE(arena.allocate(1));
  arena.reset(0);
  CHECK(arena.free_block_count() == 0);
  CHECK(arena.largest_free_block() == 0);
  CHECK_FALSE(arena.allocate(1));
}

TEST_CASE("fitting is monotone in the capacity: the same calls land at the same offsets",
          "[sim][arena]") {
  // Random sequences of allocations and releases (fixed seeds), replayed on arenas of growing
  // capacity. An arena that runs the whole sequence without a failure places every block where
  // the unbounded arena does (Note [Arena top block]); so does every larger one. Before the top
  // block was taken last, plain best fit ranked it by its size, and a larger arena could place a
  // block elsewhere and fail where a smaller one fitted.
  struct Call {
    bool allocate;
    DeviceArena::Size bytes;  // for an allocation
    std::size_t victim;       // for a release: index into the blocks handed out so far
  };
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    std::vector<Call> calls;
    std::size_t live = 0;
    for (int step = 0; step < 400; ++step) {
      if (live == 0 || rng() % 5 < 3) {
        calls.push_back({true, static_cast<DeviceArena::Size>(rng() % (512 * 40)) + 1, 0});
        ++live;
      } else {
        calls.push_back({false, 0, static_cast<std::size_t>(rng() % live)});
        --live;
      }
    }
    // Offsets on arena `capacity`, or nothing when a call failed.
    auto replay =
        [&](DeviceArena::Size capacity) -> std::optional<std::vector<DeviceArena::Offset>> {
      DeviceArena arena(capacity);
      std::vector<DeviceArena::Offset> held;
      std::vector<DeviceArena::Offset> placed;
      for (const Call& c : calls) {
        if (c.allocate) {
          const auto at = arena.allocate(c.bytes);
          if (!at) return std::nullopt;
          held.push_back(*at);
          placed.push_back(*at);
        } else {
          arena.release(held[c.victim]);
          held[c.victim] = held.back();
          held.pop_back();
        }
      }
      return placed;
    };
    const auto unbounded = replay(DeviceArena::Size{1} << 40);
    REQUIRE(unbounded);
    // The highest end of any block on the unbounded arena: the smallest capacity that can fit.
    DeviceArena::Size peak = 0;
    {
      std::size_t k = 0;
      for (const Call& c : calls) {
        if (c.allocate)
          peak = std::max(peak, (*unbounded)[k++] + DeviceArena::aligned_size(c.bytes));
      }
    }
    for (DeviceArena::Size capacity = peak - 512 * 32; capacity <= peak + 512 * 32;
         capacity += 512) {
      CAPTURE(capacity);
      const auto placed = replay(capacity);
      REQUIRE(placed.has_value() == (capacity >= peak));  // fits exactly from the peak upwards
      if (placed) CHECK(*placed == *unbounded);
    }
  }
}
