#include "memory/device_arena.hpp"

#include <algorithm>
#include <bit>

#include "core/check.hpp"

namespace memplan::sim {

namespace {
constexpr bool less_key(DeviceArena::Size size_a, DeviceArena::Offset offset_a,
                        DeviceArena::Size size_b, DeviceArena::Offset offset_b) {
  return size_a < size_b || (size_a == size_b && offset_a < offset_b);
}
}  // namespace

// ---- OffsetTable -------------------------------------------------------------------------------

void DeviceArena::OffsetTable::clear() {
  if (count_ == 0) return;
  std::fill(slots_.begin(), slots_.end(), Slot{});
  count_ = 0;
}

std::size_t DeviceArena::OffsetTable::home(Offset offset) const {
  // Fibonacci hashing of the block number; offsets are multiples of the alignment.
  const auto unit = static_cast<std::uint64_t>(offset / kAlignment);
  return static_cast<std::size_t>((unit * 0x9E3779B97F4A7C15ULL) >> shift_);
}

void DeviceArena::OffsetTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  const std::size_t size = old.empty() ? 64 : old.size() * 2;
  slots_.assign(size, Slot{});
  shift_ = 64 - std::countr_zero(size);
  count_ = 0;
  for (const Slot& s : old) {
    if (s.offset >= 0) insert(s.offset, s.block);
  }
}

void DeviceArena::OffsetTable::insert(Offset offset, BlockId block) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home(offset);
  while (slots_[i].offset >= 0) {
    MEMPLAN_CHECK(slots_[i].offset != offset, "an offset is handed out once at a time");
    i = (i + 1) & mask;
  }
  slots_[i] = {offset, block};
  ++count_;
}

DeviceArena::BlockId DeviceArena::OffsetTable::take(Offset offset) {
  if (slots_.empty()) return kNone;
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home(offset);
  while (slots_[i].offset != offset) {
    if (slots_[i].offset < 0) return kNone;
    i = (i + 1) & mask;
  }
  const BlockId block = slots_[i].block;
  // Backward-shift deletion: move later entries of the probe run into the hole when their home
  // does not lie (cyclically) after the hole.
  std::size_t j = i;
  while (true) {
    j = (j + 1) & mask;
    if (slots_[j].offset < 0) break;
    const std::size_t k = home(slots_[j].offset);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --count_;
  return block;
}

// ---- DeviceArena -------------------------------------------------------------------------------

DeviceArena::DeviceArena(Size capacity) {
  reset(capacity);
}

inline int DeviceArena::class_of(Size size) {
  const auto units = static_cast<std::uint64_t>(size / kAlignment);
  if (units < kSecondLevels) return static_cast<int>(units);
  const int msb = 63 - std::countl_zero(units);
  const auto second = static_cast<int>((units >> (msb - kSecondLevelBits)) & (kSecondLevels - 1));
  const int first = msb - kSecondLevelBits + 1;
  return first * kSecondLevels + second;
}

void DeviceArena::reset(Size capacity) {
  MEMPLAN_CHECK(capacity >= 0, "an arena's capacity is not negative");
  for (std::uint64_t firsts = first_bitmap_; firsts != 0; firsts &= firsts - 1) {
    const int first = std::countr_zero(firsts);
    for (std::uint32_t seconds = second_bitmap_[static_cast<std::size_t>(first)]; seconds != 0;
         seconds &= seconds - 1) {
      classes_[static_cast<std::size_t>(first * kSecondLevels + std::countr_zero(seconds))].clear();
    }
    second_bitmap_[static_cast<std::size_t>(first)] = 0;
  }
  first_bitmap_ = 0;
  blocks_.clear();
  spare_blocks_.clear();
  allocated_.clear();
  allocations_ = 0;
  free_blocks_ = 0;
  last_block_ = kNone;
  capacity_ = capacity / kAlignment * kAlignment;
  live_ = 0;
  peak_live_ = 0;
  peak_reserved_ = 0;
  if (capacity_ > 0) {
    const BlockId b = new_block();
    blocks_[static_cast<std::size_t>(b)] = {0, capacity_, kNone, kNone, true, false};
    last_block_ = b;
    insert_free(b);
  }
}

inline DeviceArena::BlockId DeviceArena::new_block() {
  if (!spare_blocks_.empty()) {
    const BlockId b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
  }
  blocks_.emplace_back();
  return static_cast<BlockId>(blocks_.size() - 1);
}

inline void DeviceArena::insert_free(BlockId b) {
  ++free_blocks_;
  if (b == last_block_) return;  // the top block is not indexed (Note [Arena top block])
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  const int c = class_of(block.size);
  auto& entries = classes_[static_cast<std::size_t>(c)];
  const auto at = std::lower_bound(entries.begin(), entries.end(), block,
                                   [](const FreeEntry& e, const Block& key) {
                                     return less_key(e.size, e.offset, key.size, key.offset);
                                   });
  entries.insert(at, FreeEntry{block.size, block.offset, b});
  first_bitmap_ |= std::uint64_t{1} << (c / kSecondLevels);
  second_bitmap_[static_cast<std::size_t>(c / kSecondLevels)] |= 1U << (c % kSecondLevels);
}

inline void DeviceArena::erase_free(BlockId b) {
  if (b == last_block_) {  // the top block is not indexed
    --free_blocks_;
    return;
  }
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  const int c = class_of(block.size);
  auto& entries = classes_[static_cast<std::size_t>(c)];
  const auto at = std::lower_bound(entries.begin(), entries.end(), block,
                                   [](const FreeEntry& e, const Block& key) {
                                     return less_key(e.size, e.offset, key.size, key.offset);
                                   });
  MEMPLAN_CHECK(at != entries.end() && at->block == b, "a free block is in its size class");
  erase_free_at(c, static_cast<std::size_t>(at - entries.begin()));
}

inline void DeviceArena::erase_free_at(int c, std::size_t position) {
  auto& entries = classes_[static_cast<std::size_t>(c)];
  entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(position));
  if (entries.empty()) {
    auto& seconds = second_bitmap_[static_cast<std::size_t>(c / kSecondLevels)];
    seconds &= ~(1U << (c % kSecondLevels));
    if (seconds == 0) first_bitmap_ &= ~(std::uint64_t{1} << (c / kSecondLevels));
  }
  --free_blocks_;
}

std::optional<DeviceArena::Offset> DeviceArena::allocate(Size bytes) {
  const BlockId b = take(aligned_size(bytes));
  if (b == kNone) return std::nullopt;
  Block& block = blocks_[static_cast<std::size_t>(b)];
  block.by_offset = true;
  allocated_.insert(block.offset, b);
  return block.offset;
}

std::optional<DeviceArena::Placed> DeviceArena::allocate_block(Size bytes) {
  const BlockId b = take(aligned_size(bytes));
  if (b == kNone) return std::nullopt;
  return Placed{blocks_[static_cast<std::size_t>(b)].offset, b};
}

void DeviceArena::release(Offset offset) {
  const BlockId b = allocated_.take(offset);
  MEMPLAN_CHECK(b != kNone, "only a block that is handed out can be released");
  give_back(b);
}

void DeviceArena::release_block(Handle handle) {
  MEMPLAN_CHECK(handle >= 0 && static_cast<std::size_t>(handle) < blocks_.size() &&
                    !blocks_[static_cast<std::size_t>(handle)].free &&
                    !blocks_[static_cast<std::size_t>(handle)].by_offset,
                "release_block gets a handle from allocate_block that was not released yet");
  give_back(handle);
}

// Best fit for an aligned size: the block handed out, or kNone.
inline DeviceArena::BlockId DeviceArena::take(Size size) {
  if (size > capacity_) return kNone;
  const int c = class_of(size);
  // Best fit: the smallest (size, offset) at least (size, 0) in the request's class, else the
  // first entry of the next non-empty class (Note [Arena free index]).
  int found = c;
  std::size_t position = 0;
  {
    const auto& entries = classes_[static_cast<std::size_t>(c)];
    const auto at =
        std::lower_bound(entries.begin(), entries.end(), size,
                         [](const FreeEntry& e, Size wanted) { return e.size < wanted; });
    position = static_cast<std::size_t>(at - entries.begin());
    if (at == entries.end()) found = -1;
  }
  if (found < 0) {
    const int first = c / kSecondLevels;
    const int second = c % kSecondLevels;
    const std::uint32_t above = second + 1 < kSecondLevels ? ~0U << (second + 1) : 0U;
    const std::uint32_t seconds = second_bitmap_[static_cast<std::size_t>(first)] & above;
    if (seconds != 0) {
      found = first * kSecondLevels + std::countr_zero(seconds);
    } else {
      const std::uint64_t firsts =
          first + 1 < kFirstLevels ? first_bitmap_ & (~std::uint64_t{0} << (first + 1)) : 0;
      if (firsts == 0) return take_top(size);
      const int f = std::countr_zero(firsts);
      found = f * kSecondLevels + std::countr_zero(second_bitmap_[static_cast<std::size_t>(f)]);
    }
    position = 0;
  }
  const FreeEntry chosen = classes_[static_cast<std::size_t>(found)][position];
  const BlockId b = chosen.block;
  const Offset offset = chosen.offset;
  const Size block_size = chosen.size;
  if (block_size > size) {
    // The remainder stays free, right after the new block.
    const BlockId r = new_block();  // may move blocks_
    Block& block = blocks_[static_cast<std::size_t>(b)];
    Block& rest = blocks_[static_cast<std::size_t>(r)];
    rest = {offset + size, block_size - size, b, block.next, true, false};
    if (block.next != kNone) {
      blocks_[static_cast<std::size_t>(block.next)].prev = r;
    } else {
      last_block_ = r;
    }
    block.next = r;
    block.size = size;
    // The remainder's key is smaller than the chosen block's, so when it falls in the same class
    // and stays after the entry before it, it takes the chosen entry's place: the class stays
    // sorted without an erase and an insert (the common case: splitting the block at the top).
    auto& entries = classes_[static_cast<std::size_t>(found)];
    if (class_of(rest.size) == found &&
        (position == 0 || less_key(entries[position - 1].size, entries[position - 1].offset,
                                   rest.size, rest.offset))) {
      entries[position] = FreeEntry{rest.size, rest.offset, r};
    } else {
      erase_free_at(found, position);
      insert_free(r);
    }
  } else {
    erase_free_at(found, position);
  }
  handed_out(b);
  return b;
}

// Nothing below the top block is large enough: the start of the top block, if it is.
DeviceArena::BlockId DeviceArena::take_top(Size size) {
  if (last_block_ == kNone) return kNone;
  const BlockId b = last_block_;
  if (!blocks_[static_cast<std::size_t>(b)].free ||
      blocks_[static_cast<std::size_t>(b)].size < size)
    return kNone;
  --free_blocks_;
  if (blocks_[static_cast<std::size_t>(b)].size > size) {
    const BlockId r = new_block();  // may move blocks_
    Block& block = blocks_[static_cast<std::size_t>(b)];
    blocks_[static_cast<std::size_t>(r)] = {
        block.offset + size, block.size - size, b, kNone, true, false};
    block.next = r;
    block.size = size;
    last_block_ = r;
    ++free_blocks_;  // the rest is the new top block
  }
  handed_out(b);
  return b;
}

inline void DeviceArena::handed_out(BlockId b) {
  Block& block = blocks_[static_cast<std::size_t>(b)];
  block.free = false;
  ++allocations_;
  live_ += block.size;
  if (live_ > peak_live_) peak_live_ = live_;
  if (block.offset + block.size > peak_reserved_) peak_reserved_ = block.offset + block.size;
}

inline void DeviceArena::give_back(BlockId b) {
  blocks_[static_cast<std::size_t>(b)].by_offset = false;
  --allocations_;
  live_ -= blocks_[static_cast<std::size_t>(b)].size;
  // Coalesce with the free neighbours on both sides.
  const BlockId next = blocks_[static_cast<std::size_t>(b)].next;
  if (next != kNone && blocks_[static_cast<std::size_t>(next)].free) {
    erase_free(next);
    Block& block = blocks_[static_cast<std::size_t>(b)];
    const Block& gone = blocks_[static_cast<std::size_t>(next)];
    block.size += gone.size;
    block.next = gone.next;
    if (gone.next != kNone) {
      blocks_[static_cast<std::size_t>(gone.next)].prev = b;
    } else {
      last_block_ = b;
    }
    spare_blocks_.push_back(next);
  }
  const BlockId prev = blocks_[static_cast<std::size_t>(b)].prev;
  if (prev != kNone && blocks_[static_cast<std::size_t>(prev)].free) {
    erase_free(prev);
    Block& before = blocks_[static_cast<std::size_t>(prev)];
    const Block& gone = blocks_[static_cast<std::size_t>(b)];
    before.size += gone.size;
    before.next = gone.next;
    if (gone.next != kNone) {
      blocks_[static_cast<std::size_t>(gone.next)].prev = prev;
    } else {
      last_block_ = prev;
    }
    spare_blocks_.push_back(b);
    b = prev;
  }
  blocks_[static_cast<std::size_t>(b)].free = true;
  insert_free(b);
}

DeviceArena::Size DeviceArena::reserved_bytes() const {
  // Everything above the last block in use is one free block that ends at the capacity.
  if (last_block_ == kNone) return capacity_;
  const Block& last = blocks_[static_cast<std::size_t>(last_block_)];
  return last.free ? last.offset : capacity_;
}

DeviceArena::Size DeviceArena::largest_free_block() const {
  Size top = 0;
  if (last_block_ != kNone && blocks_[static_cast<std::size_t>(last_block_)].free)
    top = blocks_[static_cast<std::size_t>(last_block_)].size;
  if (first_bitmap_ == 0) return top;
  const int first = 63 - std::countl_zero(first_bitmap_);
  const int second = 31 - std::countl_zero(second_bitmap_[static_cast<std::size_t>(first)]);
  return std::max(top,
                  classes_[static_cast<std::size_t>(first * kSecondLevels + second)].back().size);
}

}  // namespace memplan::sim
