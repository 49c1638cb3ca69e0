#include "memory/caching_allocator.hpp"

#include <algorithm>
#include <limits>

#include "core/check.hpp"

namespace memplan::sim {

CachingAllocator::CachingAllocator(Size capacity) : capacity_(capacity) {}

void CachingAllocator::reset(Size capacity) {
  blocks_.clear();
  spare_blocks_.clear();
  segments_.clear();
  spare_segments_.clear();
  small_pool_.clear();
  large_pool_.clear();
  released_.clear();
  created_.reset();
  next_address_ = 0;
  segment_count_ = 0;
  capacity_ = capacity;
  live_ = 0;
  peak_live_ = 0;
  reserved_ = 0;
  peak_reserved_ = 0;
}

CachingAllocator::Offset CachingAllocator::address(Handle b) const {
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  return segments_[static_cast<std::size_t>(block.segment)].address + block.offset;
}

CachingAllocator::Pool& CachingAllocator::pool_of(const Block& block) {
  return segments_[static_cast<std::size_t>(block.segment)].small ? small_pool_ : large_pool_;
}

void CachingAllocator::cache(Handle b) {
  Block& block = blocks_[static_cast<std::size_t>(b)];
  block.free = true;
  pool_of(block).emplace(block.size, address(b), b);
}

void CachingAllocator::uncache(Handle b) {
  Block& block = blocks_[static_cast<std::size_t>(b)];
  const auto erased = pool_of(block).erase({block.size, address(b), b});
  MEMPLAN_CHECK(erased == 1, "a cached block is in its pool");
  block.free = false;
}

CachingAllocator::Handle CachingAllocator::new_block() {
  if (!spare_blocks_.empty()) {
    const Handle b = spare_blocks_.back();
    spare_blocks_.pop_back();
    blocks_[static_cast<std::size_t>(b)] = Block{};
    return b;
  }
  blocks_.emplace_back();
  return static_cast<Handle>(blocks_.size() - 1);
}

std::optional<CachingAllocator::Handle> CachingAllocator::new_segment(Size bytes, bool small_pool) {
  if (reserved_ + bytes > capacity_) return std::nullopt;
  Segment s = 0;
  if (!spare_segments_.empty()) {
    s = spare_segments_.back();
    spare_segments_.pop_back();
  } else {
    segments_.emplace_back();
    s = static_cast<Segment>(segments_.size() - 1);
  }
  segments_[static_cast<std::size_t>(s)] = {next_address_, bytes, small_pool};
  next_address_ += bytes;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_count_;
  created_ = s;
  const Handle b = new_block();
  blocks_[static_cast<std::size_t>(b)] = {.segment = s, .offset = 0, .size = bytes};
  return b;
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const Handle b = std::get<2>(*it);
      const Block& block = blocks_[static_cast<std::size_t>(b)];
      if (block.prev != kNone || block.next != kNone) {
        ++it;
        continue;
      }
      const Segment s = block.segment;
      reserved_ -= segment_bytes(s);
      --segment_count_;
      released_.push_back(s);
      spare_segments_.push_back(s);
      spare_blocks_.push_back(b);
      it = pool->erase(it);
    }
  }
}

std::optional<CachingAllocator::Placed> CachingAllocator::allocate(Size bytes) {
  released_.clear();
  created_.reset();
  const Size size = rounded_size(bytes);
  Pool& pool = small(size) ? small_pool_ : large_pool_;
  Handle b = kNone;
  if (const auto it = pool.lower_bound({size, std::numeric_limits<Offset>::min(), kNone});
      it != pool.end()) {
    b = std::get<2>(*it);
    pool.erase(it);
    blocks_[static_cast<std::size_t>(b)].free = false;
  } else {
    std::optional<Handle> fresh = new_segment(segment_size(size), small(size));
    if (!fresh) {
      release_cached_segments();
      fresh = new_segment(segment_size(size), small(size));
    }
    if (!fresh) return std::nullopt;
    b = *fresh;
  }
  const Size rest = blocks_[static_cast<std::size_t>(b)].size - size;
  if (small(size) ? rest >= kMinBlockSize : rest > kSmallSize) {
    const Handle r = new_block();
    Block& block = blocks_[static_cast<std::size_t>(b)];
    Block& remainder = blocks_[static_cast<std::size_t>(r)];
    remainder = {.segment = block.segment,
                 .offset = block.offset + size,
                 .size = rest,
                 .prev = b,
                 .next = block.next};
    if (block.next != kNone) blocks_[static_cast<std::size_t>(block.next)].prev = r;
    block.next = r;
    block.size = size;
    cache(r);
  }
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  live_ += block.size;
  peak_live_ = std::max(peak_live_, live_);
  return Placed{block.segment, block.offset, b, block.size};
}

void CachingAllocator::absorb_next(Handle b) {
  Block& block = blocks_[static_cast<std::size_t>(b)];
  const Handle next = block.next;
  const Block& n = blocks_[static_cast<std::size_t>(next)];
  block.size += n.size;
  block.next = n.next;
  if (n.next != kNone) blocks_[static_cast<std::size_t>(n.next)].prev = b;
  spare_blocks_.push_back(next);
}

void CachingAllocator::release(Handle handle) {
  MEMPLAN_CHECK(handle >= 0 && static_cast<std::size_t>(handle) < blocks_.size() &&
                    !blocks_[static_cast<std::size_t>(handle)].free,
                "a block is released once, while handed out");
  Handle b = handle;
  live_ -= blocks_[static_cast<std::size_t>(b)].size;
  // Merge with a free neighbour on either side; the merged block keeps the lower one's handle.
  const Handle prev = blocks_[static_cast<std::size_t>(b)].prev;
  if (prev != kNone && blocks_[static_cast<std::size_t>(prev)].free) {
    uncache(prev);
    absorb_next(prev);
    b = prev;
  }
  const Handle next = blocks_[static_cast<std::size_t>(b)].next;
  if (next != kNone && blocks_[static_cast<std::size_t>(next)].free) {
    uncache(next);
    absorb_next(b);
  }
  cache(b);
}

CachingAllocator::Size CachingAllocator::largest_cached(bool small_pool) const {
  const Pool& pool = small_pool ? small_pool_ : large_pool_;
  return pool.empty() ? 0 : std::get<0>(*pool.rbegin());
}

CachingAllocator::Size CachingAllocator::free_for_segments() const {
  Size releasable = 0;  // cached segments without a live block: given back before a new one
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const auto& [size, at, b] : *pool) {
      const Block& block = blocks_[static_cast<std::size_t>(b)];
      if (block.prev == kNone && block.next == kNone) releasable += size;
    }
  }
  return capacity_ - reserved_ + releasable;
}

CachingAllocator::Size CachingAllocator::largest_free_block() const {
  return std::max({largest_cached(true), largest_cached(false), free_for_segments()});
}

CachingAllocator::Shortfall CachingAllocator::shortfall(Size bytes) const {
  Shortfall s;
  s.requested = rounded_size(bytes);
  s.small_pool = small(s.requested);
  s.largest_cached = largest_cached(s.small_pool);
  s.largest_cached_other = largest_cached(!s.small_pool);
  s.segment_bytes = segment_size(s.requested);
  s.free_for_segments = free_for_segments();
  if (s.largest_cached < s.requested) {
    s.missing = std::max<Size>(0, s.segment_bytes - s.free_for_segments);
  }
  return s;
}

}  // namespace memplan::sim
