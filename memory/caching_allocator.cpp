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

void CachingAllocator::reset(Size capacity, const Settings& settings) {
  settings_ = settings;
  blocks_.clear();
  spare_blocks_.clear();
  segments_.clear();
  spare_segments_.clear();
  small_pool_.clear();
  large_pool_.clear();
  for (Unmapped& u : unmapped_) u.clear();
  expandable_.clear();
  requests_to_pool_ = {};
  released_.clear();
  created_.reset();
  pages_changed_.clear();
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
  block.cached_at = requests_to_pool_[segments_[static_cast<std::size_t>(block.segment)].small];
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

CachingAllocator::Segment CachingAllocator::take_segment_number(Offset address, Size bytes,
                                                                bool small_pool, Stream stream,
                                                                bool expandable) {
  Segment s = 0;
  if (!spare_segments_.empty()) {
    s = spare_segments_.back();
    spare_segments_.pop_back();
  } else {
    segments_.emplace_back();
    s = static_cast<Segment>(segments_.size() - 1);
  }
  const Offset at = address >= 0 ? address : next_address_;
  segments_[static_cast<std::size_t>(s)] = {at, bytes, small_pool, stream, new_block(), expandable};
  next_address_ = std::max(next_address_, at + bytes);
  return s;
}

std::optional<CachingAllocator::Handle> CachingAllocator::new_segment(Size bytes, bool small_pool,
                                                                      Stream stream,
                                                                      Offset address) {
  if (reserved_ + bytes > capacity_) return std::nullopt;
  const Segment s = take_segment_number(address, bytes, small_pool, stream, false);
  const Handle b = segments_[static_cast<std::size_t>(s)].first;
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
  std::vector<Handle> expandable;  // unmapping changes the pools: gathered first, as c10 does
  for (const Pool* pool : {&large_pool_, &small_pool_}) {
    for (const auto& entry : *pool) {
      if (segment_of(std::get<3>(entry)).expandable) expandable.push_back(std::get<3>(entry));
    }
  }
  for (const Handle b : expandable) {
    if (block(b).free) unmap_block(b, block(b).offset, block(b).offset + block(b).size);
  }
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const Handle b = std::get<3>(*it);
      const Block& block = blocks_[static_cast<std::size_t>(b)];
      if (block.prev != kNone || block.next != kNone ||
          segments_[static_cast<std::size_t>(block.segment)].expandable) {
        ++it;
        continue;
      }
      give_back(block.segment, b);
      it = pool->erase(it);
    }
  }
}

CachingAllocator::Size CachingAllocator::expandable_size(Handle b) const {
  const Handle next = block(b).next;
  return block(b).size + (next != kNone && !block(next).mapped ? block(next).size : 0);
}

bool CachingAllocator::allocated(Handle b) const {
  return block(b).mapped && !block(b).free;
}

CachingAllocator::Handle CachingAllocator::best_fit(const Pool& pool, Size size,
                                                    Stream stream) const {
  auto it = pool.lower_bound({stream, size, std::numeric_limits<Offset>::min(), kNone});
  if (it == pool.end() || std::get<0>(*it) != stream) return kNone;
  if (segment_of(std::get<3>(*it)).expandable) {
    if (settings_.expandable_segments) {
      // c10's get_free_block: a block that can grow counts as large as it can grow to.
      for (auto next = std::next(it);
           segment_of(std::get<3>(*it)).expandable && next != pool.end() &&
           std::get<0>(*next) == stream &&
           expandable_size(std::get<3>(*next)) < expandable_size(std::get<3>(*it));
           ++next) {
        it = next;
      }
    } else {  // expandable segments since turned off: only the others serve
      while (it != pool.end() && std::get<0>(*it) == stream &&
             segment_of(std::get<3>(*it)).expandable) {
        ++it;
      }
      if (it == pool.end() || std::get<0>(*it) != stream) return kNone;
    }
  }
  const Size found = std::get<1>(*it);
  const Size max_split = settings_.max_split_size;
  // c10's get_free_block: no oversize block for a request under max_split_size, and none much
  // larger for one over it.
  if (size < max_split && found >= max_split) return kNone;
  if (size >= max_split && found >= size + kLargeBuffer) return kNone;
  return std::get<3>(*it);
}

bool CachingAllocator::should_split(Size size, Size rest) const {
  if (small(size) || settings_.expandable_segments) return rest >= kMinBlockSize;
  return size < settings_.max_split_size && rest > kSmallSize;
}

CachingAllocator::Handle CachingAllocator::split_off(Handle b, Size size) {
  const Handle r = new_block();
  Block& front = block(b);
  block(r) = {.segment = front.segment,
              .offset = front.offset + front.size - size,
              .size = size,
              .prev = b,
              .next = front.next,
              .mapped = front.mapped};
  if (front.next != kNone) block(front.next).prev = r;
  front.next = r;
  front.size -= size;
  return r;
}

void CachingAllocator::split(Handle b, Size size) {
  cache(split_off(b, block(b).size - size));
}

std::optional<CachingAllocator::Placed> CachingAllocator::allocate(Size bytes, Stream stream,
                                                                   Offset segment_address) {
  released_.clear();
  created_.reset();
  pages_changed_.clear();
  const Size size = request_size(bytes);
  Pool& pool = small(size) ? small_pool_ : large_pool_;
  ++requests_to_pool_[small(size)];
  Handle b = best_fit(pool, size, stream);
  if (b != kNone) {
    uncache(b);
  } else {
    if (settings_.garbage_collection_threshold > 0) garbage_collect();
    std::optional<Handle> fresh = new_memory(size, stream, segment_address);
    if (!fresh) {
      release_cached_segments();
      fresh = new_memory(size, stream, segment_address);
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

std::optional<CachingAllocator::Handle> CachingAllocator::new_memory(Size size, Stream stream,
                                                                     Offset address) {
  if (settings_.expandable_segments) return expandable_block(size, stream, address);
  return new_segment(segment_size(size), small(size), stream, address);
}

CachingAllocator::Size CachingAllocator::new_memory_bytes(Size size) const {
  if (!settings_.expandable_segments) return segment_size(size);
  const Size page = page_size(small(size));
  return (size + page - 1) / page * page;  // at most: a free block before the pages adds to them
}

std::optional<CachingAllocator::Handle> CachingAllocator::expandable_block(Size size, Stream stream,
                                                                           Offset address) {
  Handle c = find_expandable(size, small(size), stream, address);
  if (!block(c).mapped) c = map_block(c, std::min(block(c).size, size));
  // Free, then unmapped blocks after it: each map merges the next pages into it.
  while (c != kNone && block(c).size < size) {
    const Handle next = block(c).next;
    if (next == kNone || block(next).mapped) return std::nullopt;  // (find_expandable's room)
    c = map_block(next, std::min(size - block(c).size, block(next).size));
  }
  if (c == kNone) return std::nullopt;
  uncache(c);
  return c;
}

CachingAllocator::Handle CachingAllocator::find_expandable(Size size, bool small_pool,
                                                           Stream stream, Offset address) {
  const Unmapped& unmapped = unmapped_[small_pool];
  for (auto it = unmapped.lower_bound({stream, std::numeric_limits<Offset>::min(), kNone});
       it != unmapped.end() && std::get<0>(*it) == stream; ++it) {
    Handle c = std::get<2>(*it);
    if (block(c).prev != kNone && block(block(c).prev).free) c = block(c).prev;
    Size room = 0;
    for (Handle b = c; room < size && b != kNone && !allocated(b); b = block(b).next) {
      room += block(b).size;
    }
    if (room >= size) return c;
  }
  return segments_[static_cast<std::size_t>(add_expandable_segment(address, small_pool, stream))]
      .first;
}

CachingAllocator::Segment CachingAllocator::add_expandable_segment(Offset address, bool small_pool,
                                                                   Stream stream) {
  // c10 reserves address space for 1 1/8 of the device's memory.
  const Size page = page_size(small_pool);
  const Size pages = (capacity_ + capacity_ / 8 + page - 1) / page;
  const Size bytes = std::max<Size>(pages, 1) * page;
  const Segment s = take_segment_number(address, bytes, small_pool, stream, true);
  const Handle b = segments_[static_cast<std::size_t>(s)].first;
  expandable_.emplace(segments_[static_cast<std::size_t>(s)].address, s);
  block(b) = {.segment = s, .offset = 0, .size = bytes, .mapped = false};
  attach(b);
  return s;
}

void CachingAllocator::detach(Handle b) {
  if (block(b).mapped) {
    uncache(b);
  } else {
    const auto erased = unmapped_[segment_of(b).small].erase({segment_of(b).stream, address(b), b});
    MEMPLAN_CHECK(erased == 1, "an unmapped block is among the unmapped");
  }
}

void CachingAllocator::attach(Handle b) {
  if (block(b).mapped) {
    cache(b);
  } else {
    unmapped_[segment_of(b).small].emplace(segment_of(b).stream, address(b), b);
  }
}

CachingAllocator::Handle CachingAllocator::coalesce(Handle b) {
  // c10's try_merge_blocks: a neighbour that is not handed out and mapped as `b` is.
  const auto mergeable = [&](Handle n) {
    return n != kNone && !allocated(n) && block(n).mapped == block(b).mapped;
  };
  if (const Handle prev = block(b).prev; mergeable(prev)) {
    detach(prev);
    absorb_next(prev);
    b = prev;
  }
  if (const Handle next = block(b).next; mergeable(next)) {
    detach(next);
    absorb_next(b);
  }
  return b;
}

CachingAllocator::Handle CachingAllocator::map_block(Handle b, Size bytes) {
  const Size page = page_size(segment_of(b).small);
  const Size mapped = std::min(block(b).size, (bytes + page - 1) / page * page);
  if (reserved_ + mapped > capacity_) return kNone;
  detach(b);
  if (mapped < block(b).size) attach(split_off(b, block(b).size - mapped));
  block(b).mapped = true;
  pages_changed_.push_back({block(b).segment, block(b).offset, mapped, true});
  reserved_ += mapped;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  b = coalesce(b);
  cache(b);
  return b;
}

CachingAllocator::Size CachingAllocator::unmap_block(Handle b, Offset lo, Offset hi) {
  const Size page = page_size(segment_of(b).small);
  const Offset begin = (std::max(lo, block(b).offset) + page - 1) / page * page;
  const Offset end = std::min(hi, block(b).offset + block(b).size) / page * page;
  if (begin >= end) return 0;
  uncache(b);
  if (const Size after = block(b).offset + block(b).size - end; after > 0) {
    cache(split_off(b, after));
  }
  if (const Size before = begin - block(b).offset; before > 0) {
    const Handle front = b;
    b = split_off(front, block(front).size - before);
    cache(front);
  }
  block(b).mapped = false;
  block(b).free = false;
  reserved_ -= end - begin;
  pages_changed_.push_back({block(b).segment, begin, end - begin, false});
  attach(coalesce(b));
  return end - begin;
}

bool CachingAllocator::map(Segment s, Offset offset, Size bytes) {
  pages_changed_.clear();
  const SegmentInfo& seg = segments_[static_cast<std::size_t>(s)];
  Handle b = seg.first;
  while (b != kNone && block(b).offset + block(b).size <= offset) b = block(b).next;
  const Size page = page_size(seg.small);
  if (!seg.expandable || b == kNone || block(b).mapped || offset % page != 0 ||
      block(b).offset + block(b).size < offset + bytes) {
    return false;
  }
  if (block(b).offset < offset) {  // the unmapped front stays unmapped
    detach(b);
    const Handle rest = split_off(b, block(b).offset + block(b).size - offset);
    attach(b);
    attach(rest);
    b = rest;
  }
  return map_block(b, bytes) != kNone;
}

CachingAllocator::Size CachingAllocator::unmap(Segment s, Offset offset, Size bytes) {
  pages_changed_.clear();
  std::vector<Handle> free;
  for (Handle b = segments_[static_cast<std::size_t>(s)].first; b != kNone; b = block(b).next) {
    if (block(b).free && block(b).offset < offset + bytes &&
        offset < block(b).offset + block(b).size) {
      free.push_back(b);
    }
  }
  Size unmapped = 0;
  for (const Handle b : free) unmapped += unmap_block(b, offset, offset + bytes);
  return unmapped;
}

std::optional<CachingAllocator::Segment> CachingAllocator::expandable_segment_holding(
    Offset address) const {
  auto it = expandable_.upper_bound(address);
  if (it == expandable_.begin()) return std::nullopt;
  --it;
  const SegmentInfo& seg = segments_[static_cast<std::size_t>(it->second)];
  if (address < seg.address + seg.bytes) return it->second;
  return std::nullopt;
}

std::size_t CachingAllocator::segment_count() const {
  std::size_t count = segment_count_;
  for (const auto& [address, s] : expandable_) {
    for (Handle b = segments_[static_cast<std::size_t>(s)].first; b != kNone; b = block(b).next) {
      if (block(b).mapped && (block(b).prev == kNone || !block(block(b).prev).mapped)) ++count;
    }
  }
  return count;
}

void CachingAllocator::garbage_collect() {
  const auto threshold =
      static_cast<Size>(settings_.garbage_collection_threshold * static_cast<double>(capacity_));
  if (reserved_ <= threshold) return;
  const Size target = reserved_ - threshold;
  const auto whole = [&](Handle b) {
    return block(b).prev == kNone && block(b).next == kNone && !segment_of(b).expandable;
  };
  const auto age = [&](Handle b) { return requests_to_pool_[false] - block(b).cached_at; };
  double total_age = 0;
  std::int64_t freeable = 0;
  for (const auto& entry : large_pool_) {
    if (whole(std::get<3>(entry))) {
      total_age += static_cast<double>(age(std::get<3>(entry)));
      ++freeable;
    }
  }
  Size reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && freeable > 0) {
    const double threshold_age = total_age / static_cast<double>(freeable);
    freed = false;  // every block at least as old as the average, in the pool's order
    for (auto it = large_pool_.begin(); it != large_pool_.end();) {
      const Handle b = std::get<3>(*it);
      if (!whole(b) || static_cast<double>(age(b)) < threshold_age) {
        ++it;
        continue;
      }
      freed = true;
      reclaimed += block(b).size;
      total_age -= static_cast<double>(age(b));
      --freeable;
      block(b).free = false;
      give_back(block(b).segment, b);
      it = large_pool_.erase(it);
    }
  }
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
         new_memory_bytes(size) > free_device;
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
  MEMPLAN_CHECK(
      handle >= 0 && static_cast<std::size_t>(handle) < blocks_.size() && allocated(handle),
      "a block is released once, while handed out");
  live_ -= block(handle).size;
  // Merged with a free neighbour on either side; the merged block keeps the lower one's handle.
  cache(coalesce(handle));
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
      const Block& cached = block(b);
      if (segment_of(b).expandable) {  // its whole pages
        const Size page = page_size(segment_of(b).small);
        releasable += std::max<Size>(0, (cached.offset + cached.size) / page * page -
                                            (cached.offset + page - 1) / page * page);
      } else if (cached.prev == kNone && cached.next == kNone) {
        releasable += size;
      }
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
  s.segment_bytes = new_memory_bytes(s.requested);
  s.free_for_segments = free_for_segments();
  if (s.largest_cached < s.requested) {
    s.missing = std::max<Size>(0, s.segment_bytes - s.free_for_segments);
  }
  return s;
}

}  // namespace memplan::sim
