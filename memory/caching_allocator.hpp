#pragma once
// CachingAllocator: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, with its
// default configuration or PYTORCH_CUDA_ALLOC_CONF's: Settings) as a model of device memory, for
// steps recorded from PyTorch and for plans meant to run there. Like DeviceArena it knows only
// sizes and places; the simulator and the backends make the same calls and get the same placements
// (memory/device_memory.hpp).
//
// Why: a single contiguous arena loses every hole between live blocks, so a large request fails
// there while the device has the bytes free in several holes. PyTorch asks the driver for memory
// a segment at a time, and when a new segment does not fit it gives back every cached segment
// that holds no live block and tries again; the driver maps physical pages anywhere, so what is
// lost is only the unused part of segments that still hold a live block. A step at the edge of
// the device (AlexNet at batch 6144 on 16 GB, issue #18) fits one model and not the other.
//
// How (PyTorch's rules, constants as there):
//   - a request is rounded up to 512 bytes; up to 1 MiB it is "small", served from the small pool,
//     otherwise from the large pool;
//   - best fit: the smallest cached free block of the request's pool that is large enough, lowest
//     address among equals (a segment's address is its place in one growing address space here,
//     so a newer segment has the higher address);
//   - none large enough: a new segment of 2 MiB for a small request, 20 MiB for one under 10 MiB,
//     else the request rounded up to 2 MiB; when the segments' total plus the new one would exceed
//     the capacity, every cached segment without a live block is given back first, and the
//     request fails when it still does not fit (PyTorch's OOM);
//   - the block taken is split when the rest is at least 512 bytes (small pool) or more than
//     1 MiB (large pool): the request keeps the front, the rest stays cached;
//   - a released block merges with its free neighbours in its segment and is cached; segments are
//     given back to the driver only as above.
// Settings PyTorch takes from PYTORCH_CUDA_ALLOC_CONF, as c10 applies them (Settings):
//   - max_split_size: a request under it is never served by a cached block of that size or more,
//     a request of that size or more only by a block less than 20 MiB larger, and a block is split
//     only for a request under it;
//   - roundup_power2_divisions: a request in a power-of-two interval [2^k, 2^(k+1)) given N > 1
//     divisions is rounded up to the next of the N equal steps of that interval (when it is larger
//     than 512 x N), not to 512 bytes; the intervals are keyed from 1 MiB (all below) to 32 GiB
//     (all above).
// Streams: a block serves requests of the stream whose segment it is in (c10 keys its pools by
// stream); a Program allocates on the compute stream, stream 0. A snapshot's replay starts from
// its segments and blocks as they were (add_segment, place) and gives back the segments the
// program did (release_segment).
// Expandable segments (expandable_segments:True, c10's Note [Expandable Segments]): a pool's
// requests on a stream share one segment of address space (1 1/8 of the capacity) into which
// physical pages are mapped as needed, 2 MiB pages for the small pool and 20 MiB for the large.
// A request no cached block serves maps pages at the lowest address where the free and unmapped
// blocks after it hold it (a free block just before an unmapped one grows into it); blocks split
// whenever 512 bytes or more are left, in either pool; best fit counts a free block at the end of
// what is mapped as large as it can grow, after every block that fits as it is. Out of memory, the
// whole pages of cached free blocks are unmapped (and segments without a live block given back)
// before the request is tried again. Reserved bytes are the pages mapped; each run of mapped pages
// counts as a segment, as a snapshot lists them.
// garbage_collection_threshold (G > 0): before a request that no cached block serves takes new
// memory, when the reserved bytes exceed G x the capacity (c10: its per-process memory fraction,
// the only case where it collects), whole cached segments of the large pool are given back, oldest
// first: those not taken for at least the average number of requests to their pool since they were
// cached, pass after pass, until the excess is reclaimed.
// Not modelled: which cached blocks max_split_size makes c10 give back first when cudaMalloc fails
// (here, as without it, every cached segment without a live block).
//
// Placement depends on the capacity (a tighter device gives segments back earlier), as PyTorch's
// does: fitting is not monotone in the capacity under this model. A run that fits at capacity C
// with peak reserved bytes R gives back segments at the same requests at every capacity in
// [R, C], so it runs the same there; a run on an unlimited device gives none back and runs the
// same at every capacity from its peak up.
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/allocator_model.hpp"

namespace memplan::sim {

class CachingAllocator {
 public:
  using Size = std::int64_t;
  using Offset = std::int64_t;
  using Handle = std::int32_t;   // a block handed out
  using Segment = std::int32_t;  // a segment's number, reused once it was given back
  using Stream = std::int64_t;

  static constexpr Size kMinBlockSize = 512;
  static constexpr Size kSmallSize = Size{1} << 20;
  static constexpr Size kSmallBuffer = Size{2} << 20;
  static constexpr Size kMinLargeAlloc = Size{10} << 20;
  static constexpr Size kRoundLarge = Size{2} << 20;
  static constexpr Size kLargeBuffer = Size{20} << 20;

  static constexpr Size kNoMaxSplit = AllocatorConfig::kNoMaxSplit;
  static constexpr std::size_t kRoundupIntervals = AllocatorConfig::kRoundupIntervals;

  /// PYTORCH_CUDA_ALLOC_CONF's settings the model follows; the default is PyTorch's default.
  using Settings = AllocatorConfig;

  explicit CachingAllocator(Size capacity = 0);
  CachingAllocator(Size capacity, const Settings& settings);

  /// Forgets every block and segment and sets a new capacity and settings; keeps the buffers for
  /// reuse.
  void reset(Size capacity, const Settings& settings = {});

  static constexpr Size rounded_size(Size bytes) {
    return bytes <= 0 ? kMinBlockSize : (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  }
  /// The block size a request of `bytes` takes under the settings (rounded_size without them).
  [[nodiscard]] Size request_size(Size bytes) const;
  /// The size of the segment a request of rounded size `size` asks the driver for.
  static constexpr Size segment_size(Size size) {
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  }

  /// The page an expandable segment of the pool maps at a time.
  static constexpr Size page_size(bool small_pool) {
    return small_pool ? kSmallBuffer : kLargeBuffer;
  }

  struct Placed {
    Segment segment;
    Offset offset;  // within the segment
    Handle handle;
    Size size;  // the block: rounded_size(bytes), or more where the rest was too small to split
  };
  /// A block of at least rounded_size(bytes), or nullopt when PyTorch would report out of memory.
  /// Either way, segments may have been given back or taken: segments_released() and
  /// segment_created().
  /// `segment_address`: where a new segment goes if the request takes one (a replay of a recorded
  /// run gives cudaMalloc's address, which orders equal blocks as the real allocator does); -1:
  /// after every segment so far.
  [[nodiscard]] std::optional<Placed> allocate(Size bytes, Stream stream = 0,
                                               Offset segment_address = -1);
  void release(Handle handle);

  /// A segment of `bytes` at `address` of `stream`, in the small pool or the large, all of it a
  /// cached free block: a segment the real allocator held; nullopt when it does not fit the
  /// capacity beside the segments held. Addresses of segments made later follow the highest one
  /// given.
  std::optional<Segment> add_segment(Offset address, Size bytes, bool small_pool, Stream stream);
  /// An expandable segment's address space at `address` for `stream`'s requests to the small pool
  /// or the large, nothing mapped yet: one the real allocator held (map its mapped pages).
  Segment add_expandable_segment(Offset address, bool small_pool, Stream stream);
  /// Maps the pages of expandable segment `s` over [offset, offset + bytes), unmapped so far, as
  /// a cached free block; false when they are not all unmapped or do not fit the capacity.
  bool map(Segment s, Offset offset, Size bytes);
  /// Unmaps the whole pages of expandable segment `s` within [offset, offset + bytes) that lie in
  /// cached free blocks (a recorded segment_unmap); the bytes unmapped.
  Size unmap(Segment s, Offset offset, Size bytes);
  /// The expandable segment whose address space holds `address`, if any.
  [[nodiscard]] std::optional<Segment> expandable_segment_holding(Offset address) const;
  /// Hands out the block of `size` bytes at `offset` in segment `s`, splitting the cached free
  /// block that holds it; nullopt when no free block holds all of it.
  [[nodiscard]] std::optional<Handle> place(Segment s, Offset offset, Size size);
  /// Gives back segment `s` when no block of it is live (torch.cuda.empty_cache); false if one is.
  bool release_segment(Segment s);
  /// Whether a request of `bytes` on `stream` fails when the device has `free_device` bytes free
  /// beside the segments held: no cached block of its pool and stream serves it and the segment it
  /// would take is larger (c10's out of memory, after it gave back its cached segments).
  [[nodiscard]] bool fails_with_free(Size bytes, Stream stream, Size free_device) const;

  /// The segments the last allocate gave back, in the order it gave them back.
  [[nodiscard]] const std::vector<Segment>& segments_released() const { return released_; }
  /// The segment the last allocate took from the driver (cudaMalloc), if it took one; an
  /// expandable segment's pages are pages_changed.
  [[nodiscard]] std::optional<Segment> segment_created() const { return created_; }
  /// Pages of an expandable segment mapped or unmapped (c10's segment_map, segment_unmap).
  struct PageChange {
    Segment segment;
    Offset offset;  // within the segment's address space
    Size bytes;
    bool mapped;  // false: unmapped
  };
  /// The pages the last allocate, map or unmap mapped and unmapped, in order.
  [[nodiscard]] const std::vector<PageChange>& pages_changed() const { return pages_changed_; }
  [[nodiscard]] Size segment_bytes(Segment s) const {
    return segments_[static_cast<std::size_t>(s)].bytes;
  }
  /// Where segment `s` starts: the address add_segment or allocate gave it, else its place after
  /// the segments before it.
  [[nodiscard]] Offset segment_address(Segment s) const {
    return segments_[static_cast<std::size_t>(s)].address;
  }

  [[nodiscard]] Size capacity() const { return capacity_; }
  /// Rounded bytes of the blocks handed out.
  [[nodiscard]] Size live_bytes() const { return live_; }
  [[nodiscard]] Size peak_live_bytes() const { return peak_live_; }
  /// Bytes of the segments held (PyTorch's memory_reserved).
  [[nodiscard]] Size reserved_bytes() const { return reserved_; }
  [[nodiscard]] Size peak_reserved_bytes() const { return peak_reserved_; }
  /// The largest request that would succeed now: a cached free block, or a new segment in what
  /// the live segments leave of the capacity.
  [[nodiscard]] Size largest_free_block() const;

  /// Why a request fails, in PyTorch's terms: the pools are separate, and a request no cached
  /// block of its pool holds takes a new segment of segment_size, which must fit in what the
  /// capacity leaves beside the segments that hold live blocks (the others are given back first).
  struct Shortfall {
    Size requested = 0;             // rounded_size of the request
    bool small_pool = false;        // served from the small pool (requests up to 1 MiB)
    Size largest_cached = 0;        // the largest cached free block of its pool (0: none)
    Size largest_cached_other = 0;  // ... of the other pool, which cannot serve it
    Size segment_bytes = 0;         // the segment a new block for it takes
    Size free_for_segments = 0;     // the capacity less the segments holding live blocks
    Size missing = 0;               // what a new segment lacks; 0 when the request would succeed
  };
  /// The shortfall of a request of `bytes` now (its `missing` is 0 when it would succeed).
  [[nodiscard]] Shortfall shortfall(Size bytes) const;
  /// Segments held: each cudaMalloc'ed one, and each run of mapped pages of an expandable one.
  [[nodiscard]] std::size_t segment_count() const;

 private:
  static constexpr Handle kNone = -1;
  struct Block {
    Segment segment = -1;
    Offset offset = 0;
    Size size = 0;
    Handle prev = kNone;  // neighbours within the segment
    Handle next = kNone;
    bool free = false;           // cached: in its pool
    bool mapped = true;          // false: an expandable segment's unmapped pages
    std::int64_t cached_at = 0;  // its pool's requests when it was cached (its age for GC)
  };
  struct SegmentInfo {
    Offset address = 0;  // in the one growing address space: orders blocks of equal size
    Size bytes = 0;
    bool small = false;  // in the small pool (a 2 MiB segment for requests up to 1 MiB)
    Stream stream = 0;
    Handle first = kNone;  // the block at offset 0 (merges keep the lower block's handle)
    bool expandable = false;
  };
  /// (stream, size, address, block): a pool's cached free blocks, per stream in best-fit order.
  using Pool = std::set<std::tuple<Stream, Size, Offset, Handle>>;
  /// (stream, address, block): a pool's unmapped blocks, by address per stream.
  using Unmapped = std::set<std::tuple<Stream, Offset, Handle>>;

  [[nodiscard]] static bool small(Size size) { return size <= kSmallSize; }
  [[nodiscard]] Size largest_cached(bool small_pool, Stream stream = 0) const;
  /// The cached block c10's get_free_block takes for a request of `size`, or kNone.
  [[nodiscard]] Handle best_fit(const Pool& pool, Size size, Stream stream) const;
  /// How large block `b` can grow: itself and the unmapped block after it.
  [[nodiscard]] Size expandable_size(Handle b) const;
  [[nodiscard]] bool allocated(Handle b) const;
  [[nodiscard]] const Block& block(Handle b) const { return blocks_[static_cast<std::size_t>(b)]; }
  [[nodiscard]] Block& block(Handle b) { return blocks_[static_cast<std::size_t>(b)]; }
  [[nodiscard]] const SegmentInfo& segment_of(Handle b) const {
    return segments_[static_cast<std::size_t>(block(b).segment)];
  }
  /// New memory for a request of rounded size `size`: a segment, or pages of an expandable one.
  std::optional<Handle> new_memory(Size size, Stream stream, Offset address);
  [[nodiscard]] Size new_memory_bytes(Size size) const;
  std::optional<Handle> expandable_block(Size size, Stream stream, Offset address);
  /// c10's find_expandable_block: the lowest unmapped block (or the free block before it) from
  /// which free and unmapped blocks hold `size`; a new expandable segment when none does.
  Handle find_expandable(Size size, bool small_pool, Stream stream, Offset address);
  /// Maps the first `bytes` (rounded up to pages) of unmapped block `b` as a cached free block,
  /// merged with free neighbours; the merged block, or kNone when the capacity is exceeded.
  Handle map_block(Handle b, Size bytes);
  /// Unmaps the whole pages of cached free block `b` within [lo, hi) (segment offsets).
  Size unmap_block(Handle b, Offset lo, Offset hi);
  /// Takes `b` out of its pool or the unmapped blocks, whichever holds it.
  void detach(Handle b);
  void attach(Handle b);
  /// Merges `b` (detached) with the neighbours in its state (free, or unmapped); the merged block,
  /// still detached.
  Handle coalesce(Handle b);
  /// A new block after `b` in its segment, over its last `size` bytes.
  Handle split_off(Handle b, Size size);
  void garbage_collect();
  [[nodiscard]] bool should_split(Size size, Size rest) const;
  /// Block `b` keeps its first `size` bytes; the rest becomes a cached free block after it.
  void split(Handle b, Size size);
  [[nodiscard]] Size free_for_segments() const;
  [[nodiscard]] Pool& pool_of(const Block& block);
  [[nodiscard]] Offset address(Handle b) const;
  void cache(Handle b);
  void uncache(Handle b);
  /// Block `b` takes over the block after it in its segment (both out of the pools).
  void absorb_next(Handle b);
  Handle new_block();
  /// A segment number for a segment of `bytes` at `address` (-1: after every segment so far), its
  /// first block a new handle (not initialised).
  Segment take_segment_number(Offset address, Size bytes, bool small_pool, Stream stream,
                              bool expandable);
  std::optional<Handle> new_segment(Size bytes, bool small_pool, Stream stream,
                                    Offset address = -1);
  void give_back(Segment s, Handle block);
  void release_cached_segments();

  std::vector<Block> blocks_;
  std::vector<Handle> spare_blocks_;
  std::vector<SegmentInfo> segments_;
  std::vector<Segment> spare_segments_;
  Pool small_pool_;
  Pool large_pool_;
  std::array<Unmapped, 2> unmapped_;      // [small pool?]
  std::map<Offset, Segment> expandable_;  // the expandable segments by address (never given back)
  std::array<std::int64_t, 2> requests_to_pool_{};  // [small pool?]: c10's gc counters
  std::vector<Segment> released_;
  std::optional<Segment> created_;
  std::vector<PageChange> pages_changed_;
  Settings settings_;
  Offset next_address_ = 0;
  std::size_t segment_count_ = 0;
  Size capacity_ = 0;
  Size live_ = 0;
  Size peak_live_ = 0;
  Size reserved_ = 0;
  Size peak_reserved_ = 0;
};

}  // namespace memplan::sim
