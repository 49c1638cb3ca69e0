#include "memory/caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/check.hpp"

namespace memplan::sim {

CachingAllocator::CachingAllocator(Size capacity) : capacity_(capacity) {}

CachingAllocator::CachingAllocator(Size capacity, const Settings& settings)
    : settings_(settings), capacity_(capacity) {}

CachingAllocator::Size CachingAllocator::request_size(Size bytes) const {
  // c10's round_size with roundup_power2_divisions: the interval's index counts powers of two
  // from 1 MiB (requests under 2 MiB share index 0), up to the last.
  if (bytes < kMinBlockSize) return kMinBlockSize;
  const auto log2 = static_cast<int>(std::bit_width(static_cast<std::uint64_t>(bytes))) - 1;
  const std::size_t index = std::min<std::size_t>(static_cast<std::size_t>(std::max(log2 - 20, 0)),
                                                  kRoundupIntervals - 1);
  const Size divisions = settings_.roundup_power2_divisions[index];
  if (divisions > 1 && bytes > kMinBlockSize * divisions) {
    if (std::has_single_bit(static_cast<std::uint64_t>(bytes))) return bytes;
    const Size floor = Size{1} << log2;
    const Size step = floor >> (std::bit_width(static_cast<std::uint64_t>(divisions)) - 1);
    if (step == 0) return floor << 1;
    const Size down = bytes & ~(step - 1);
    return down == bytes ? bytes : down + step;
  }
  return rounded_size(bytes);
}

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
  pool_of(block).emplace(segments_[static_cast<std::size_t>(block.segment)].stream, block.size,
                         address(b), b);
}

void CachingAllocator::uncache(Handle b) {
  Block& block = blocks_[static_cast<std::size_t>(b)];
  const auto erased = pool_of(block).erase(
      {segments_[static_cast<std::size_t>(block.segment)].stream, block.size, address(b), b});
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

std::optional<CachingAllocator::Handle> CachingAllocator::new_segment(Size bytes, bool small_pool,
                                                                      Stream stream,
                                                                      Offset address) {
  if (reserved_ + bytes > capacity_) return std::nullopt;
  Segment s = 0;
  if (!spare_segments_.empty()) {
    s = spare_segments_.back();
    spare_segments_.pop_back();
  } else {
    segments_.emplace_back();
    s = static_cast<Segment>(segments_.size() - 1);
  }
  const Handle b = new_block();
  const Offset at = address >= 0 ? address : next_address_;
  segments_[static_cast<std::size_t>(s)] = {at, bytes, small_pool, stream, b};
  next_address_ = std::max(next_address_, at + bytes);
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_count_;
  created_ = s;
  blocks_[static_cast<std::size_t>(b)] = {.segment = s, .offset = 0, .size = bytes};
  return b;
}

void CachingAllocator::give_back(Segment s, Handle block) {
  reserved_ -= segment_bytes(s);
  --segment_count_;
  released_.push_back(s);
  spare_segments_.push_back(s);
  spare_blocks_.push_back(block);
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const Handle b = std::get<3>(*it);
      const Block& block = blocks_[static_cast<std::size_t>(b)];
      if (block.prev != kNone || block.next != kNone) {
        ++it;
        continue;
      }
      give_back(block.segment, b);
      it = pool->erase(it);
    }
  }
}

CachingAllocator::Handle CachingAllocator::best_fit(const Pool& pool, Size size,
                                                    Stream stream) const {
  const auto it = pool.lower_bound({stream, size, std::numeric_limits<Offset>::min(), kNone});
  if (it == pool.end() || std::get<0>(*it) != stream) return kNone;
  const Size found = std::get<1>(*it);
  const Size max_split = settings_.max_split_size;
  // c10's get_free_block: no oversize block for a request under max_split_size, and none much
  // larger for one over it.
  if (size < max_split && found >= max_split) return kNone;
  if (size >= max_split && found >= size + kLargeBuffer) return kNone;
  return std::get<3>(*it);
}

bool CachingAllocator::should_split(Size size, Size rest) const {
  return small(size) ? rest >= kMinBlockSize : size < settings_.max_split_size && rest > kSmallSize;
}

void CachingAllocator::split(Handle b, Size size) {
  const Handle r = new_block();
  Block& block = blocks_[static_cast<std::size_t>(b)];
  Block& remainder = blocks_[static_cast<std::size_t>(r)];
  remainder = {.segment = block.segment,
               .offset = block.offset + size,
               .size = block.size - size,
               .prev = b,
               .next = block.next};
  if (block.next != kNone) blocks_[static_cast<std::size_t>(block.next)].prev = r;
  block.next = r;
  block.size = size;
  cache(r);
}

std::optional<CachingAllocator::Placed> CachingAllocator::allocate(Size bytes, Stream stream,
                                                                   Offset segment_address) {
  released_.clear();
  created_.reset();
  const Size size = request_size(bytes);
  Pool& pool = small(size) ? small_pool_ : large_pool_;
  Handle b = best_fit(pool, size, stream);
  if (b != kNone) {
    uncache(b);
  } else {
    std::optional<Handle> fresh =
        new_segment(segment_size(size), small(size), stream, segment_address);
    if (!fresh) {
      release_cached_segments();
      fresh = new_segment(segment_size(size), small(size), stream, segment_address);
    }
    if (!fresh) return std::nullopt;
    b = *fresh;
  }
  if (should_split(size, blocks_[static_cast<std::size_t>(b)].size - size)) split(b, size);
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  live_ += block.size;
  peak_live_ = std::max(peak_live_, live_);
  return Placed{block.segment, block.offset, b, block.size};
}

std::optional<CachingAllocator::Segment> CachingAllocator::add_segment(Offset address, Size bytes,
                                                                       bool small_pool,
                                                                       Stream stream) {
  const std::optional<Handle> b = new_segment(bytes, small_pool, stream, address);
  if (!b) return std::nullopt;
  cache(*b);
  return blocks_[static_cast<std::size_t>(*b)].segment;
}

std::optional<CachingAllocator::Handle> CachingAllocator::place(Segment s, Offset offset,
                                                                Size size) {
  Handle b = segments_[static_cast<std::size_t>(s)].first;
  while (b != kNone &&
         blocks_[static_cast<std::size_t>(b)].offset + blocks_[static_cast<std::size_t>(b)].size <=
             offset) {
    b = blocks_[static_cast<std::size_t>(b)].next;
  }
  if (b == kNone) return std::nullopt;
  const Block holder = blocks_[static_cast<std::size_t>(b)];  // a copy: split() may grow blocks_
  if (!holder.free || holder.offset > offset || holder.offset + holder.size < offset + size) {
    return std::nullopt;
  }
  uncache(b);
  if (holder.offset < offset) {  // the free front stays cached, the block is the rest
    split(b, offset - holder.offset);
    const Handle front = b;
    b = blocks_[static_cast<std::size_t>(front)].next;
    uncache(b);
    cache(front);
  }
  if (blocks_[static_cast<std::size_t>(b)].size > size) split(b, size);
  live_ += size;
  peak_live_ = std::max(peak_live_, live_);
  return b;
}

bool CachingAllocator::fails_with_free(Size bytes, Stream stream, Size free_device) const {
  const Size size = request_size(bytes);
  return best_fit(small(size) ? small_pool_ : large_pool_, size, stream) == kNone &&
         segment_size(size) > free_device;
}

bool CachingAllocator::release_segment(Segment s) {
  const Handle b = segments_[static_cast<std::size_t>(s)].first;
  const Block& block = blocks_[static_cast<std::size_t>(b)];
  if (!block.free || block.next != kNone) return false;
  uncache(b);
  give_back(s, b);
  return true;
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

CachingAllocator::Size CachingAllocator::largest_cached(bool small_pool, Stream stream) const {
  const Pool& pool = small_pool ? small_pool_ : large_pool_;
  auto it = pool.lower_bound({stream + 1, 0, std::numeric_limits<Offset>::min(), kNone});
  if (it == pool.begin()) return 0;
  --it;
  return std::get<0>(*it) == stream ? std::get<1>(*it) : 0;
}

CachingAllocator::Size CachingAllocator::free_for_segments() const {
  Size releasable = 0;  // cached segments without a live block: given back before a new one
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const auto& [stream, size, at, b] : *pool) {
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
  s.requested = request_size(bytes);
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
