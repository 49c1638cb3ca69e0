#pragma once
// DeviceArena: the one allocator of device memory, shared by the simulator and by the host and
// CUDA backends for their real arena. It manages offsets within [0, capacity) of one capped region:
// best fit among the free blocks below the top one (the smallest that is large enough, lowest
// offset among equals), else the start of the top block (the free space above the highest block
// handed out), sizes rounded up to 512 bytes, neighbouring free blocks coalesced on release.
// Because the top block is taken only when nothing below fits, whatever its size, placement does
// not depend on the capacity (Note [Arena top block]): a sequence of calls that fits in a
// capacity fits, at the same offsets, in every larger one. Because the backends run
// the same sequence of allocate/release calls as the simulator, they get the same offsets, and
// fragmentation predicted is fragmentation measured.
//
// Nothing here knows about tensors or programs: only sizes and offsets.
//
// How (Note [Arena free index]): every block, free or handed out, is a node of one address-ordered
// doubly linked list (boundary tags), so coalescing looks only at the two neighbours. Free blocks
// are also indexed by size in segregated classes (TLSF-style: a class per power of two split
// into 16 equal ranges; sizes below 16 units of 512 bytes have a class each), each class a vector
// sorted by (size, offset), with a two-level bitmap of the non-empty classes. Best fit is a binary
// search in the request's class and, when nothing there is large enough, the first entry of the
// next non-empty class (two count-trailing-zeros): every size in a higher class is larger than
// every size in a lower one, so this is exactly the smallest (size, offset) at least as large as
// the request — the same placement as an ordered set of (size, offset). Blocks handed out by
// allocate() are found by offset in an open-addressing table for release(); allocate_block()
// returns a handle instead, and release_block() needs no lookup. Nodes, class vectors and the
// table keep their memory across reset(), so a reused arena does not touch the system heap once
// warm.
//
// Note [Arena top block]: plain best fit would rank the top block by its size, which is the
// capacity minus the highest end in use, so a larger arena could place a block elsewhere and run
// out of memory later where a smaller one did not (a plan fitting 27.0 MB and failing at 28 MB).
// The top block is therefore kept out of the size index and used last: the placements are those
// of an unbounded arena, and a call fails exactly when that arena's block would end above the
// capacity. Fitting is monotone in the capacity.
#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace memplan::sim {

class DeviceArena {
 public:
  using Size = std::int64_t;
  using Offset = std::int64_t;
  static constexpr Size kAlignment = 512;

  explicit DeviceArena(Size capacity = 0);
  /// A copy is an arena in the same state, handles included: a memory check resumes from one
  /// (search/oracle/evaluator.hpp). Assigning reuses the target's buffers.
  DeviceArena(const DeviceArena&) = default;
  DeviceArena& operator=(const DeviceArena&) = default;

  /// Forgets every allocation and sets a new capacity; keeps the buffers for reuse.
  void reset(Size capacity);

  /// Size actually taken for a request: rounded up to the alignment, at least one unit.
  static constexpr Size aligned_size(Size bytes) {
    return bytes <= 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

  /// The offset of a new block of aligned_size(bytes), or nullopt when no free block is large
  /// enough (the arena is unchanged then).
  [[nodiscard]] std::optional<Offset> allocate(Size bytes);
  /// Returns the block that starts at `offset` (which allocate returned and was not released yet).
  void release(Offset offset);

  /// The same placement without the offset lookup: a caller that keeps the handle (the engine,
  /// per buffer) releases by handle and skips the offset table, a cache miss per call. A block
  /// taken with allocate_block is released with release_block, one taken with allocate with
  /// release (checked).
  using Handle = std::int32_t;
  struct Placed {
    Offset offset;
    Handle handle;
  };
  [[nodiscard]] std::optional<Placed> allocate_block(Size bytes);
  void release_block(Handle handle);

  [[nodiscard]] Size capacity() const { return capacity_; }
  /// Aligned bytes of the blocks currently handed out.
  [[nodiscard]] Size live_bytes() const { return live_; }
  [[nodiscard]] Size peak_live_bytes() const { return peak_live_; }
  /// End of the highest block handed out now.
  [[nodiscard]] Size reserved_bytes() const;
  /// High-water mark of the end of any block handed out since reset: what a real arena must map.
  [[nodiscard]] Size peak_reserved_bytes() const { return peak_reserved_; }
  [[nodiscard]] Size largest_free_block() const;
  [[nodiscard]] std::size_t allocation_count() const { return allocations_; }
  [[nodiscard]] std::size_t free_block_count() const { return free_blocks_; }

 private:
  using BlockId = Handle;
  static constexpr BlockId kNone = -1;
  struct Block {
    Offset offset = 0;
    Size size = 0;
    BlockId prev = kNone;  // address neighbours
    BlockId next = kNone;
    bool free = false;
    bool by_offset = false;  // handed out by allocate: in the offset table
  };
  /// A free block in its size class; classes are sorted by (size, offset).
  struct FreeEntry {
    Size size;
    Offset offset;
    BlockId block;
  };
  static constexpr int kSecondLevelBits = 4;
  static constexpr int kSecondLevels = 1 << kSecondLevelBits;
  static constexpr int kFirstLevels = 64;
  static constexpr int kClasses = kFirstLevels * kSecondLevels;

  /// Offset -> block of the handed-out blocks: linear probing, backward-shift deletion.
  class OffsetTable {
   public:
    void clear();
    void insert(Offset offset, BlockId block);
    /// Removes `offset` and returns its block, or kNone when it is not there.
    BlockId take(Offset offset);
    [[nodiscard]] std::size_t size() const { return count_; }

   private:
    struct Slot {
      Offset offset = -1;  // -1: empty
      BlockId block = kNone;
    };
    [[nodiscard]] std::size_t home(Offset offset) const;
    void grow();
    std::vector<Slot> slots_;
    std::size_t count_ = 0;
    int shift_ = 64;
  };

  static int class_of(Size size);
  BlockId take(Size size);
  BlockId take_top(Size size);
  void handed_out(BlockId b);
  void give_back(BlockId b);
  BlockId new_block();
  void insert_free(BlockId b);
  void erase_free(BlockId b);
  void erase_free_at(int c, std::size_t position);

  std::vector<Block> blocks_;
  std::vector<BlockId> spare_blocks_;
  BlockId last_block_ = kNone;  // the block that ends at the capacity; when free, the top block
  std::array<std::vector<FreeEntry>, kClasses> classes_;
  std::uint64_t first_bitmap_ = 0;
  std::array<std::uint32_t, kFirstLevels> second_bitmap_{};
  OffsetTable allocated_;
  std::size_t allocations_ = 0;
  std::size_t free_blocks_ = 0;
  Size capacity_ = 0;
  Size live_ = 0;
  Size peak_live_ = 0;
  Size peak_reserved_ = 0;
};

}  // namespace memplan::sim
