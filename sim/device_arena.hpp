#pragma once
// DeviceArena: the one allocator of device memory, shared by the simulator and by the host and
// CUDA backends for their real arena. It manages offsets within [0, capacity) of one capped region:
// best fit (the smallest free block that is large enough, lowest offset among equals), sizes
// rounded up to 512 bytes, neighbouring free blocks coalesced on release. Because the backends run
// the same sequence of allocate/release calls as the simulator, they get the same offsets, and
// fragmentation predicted is fragmentation measured.
//
// Nothing here knows about tensors or programs: only sizes and offsets. allocate and release are
// O(log n) in the number of blocks; node memory comes from a pool owned by the arena and is
// recycled (NodePool), so a reset() arena that is used again does not touch the system heap.
#include <array>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memplan::sim {

/// A memory resource for tree nodes: fixed-size free lists over chunks that are kept until the
/// pool dies, so allocate and deallocate are a few instructions and never call the system heap once
/// warm. (std::pmr::unsynchronized_pool_resource spends more time finding a node's chunk on
/// deallocate than the arena spends on its own work.)
class NodePool : public std::pmr::memory_resource {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() override;

 private:
  static constexpr std::size_t kGranule = 16;
  static constexpr std::size_t kMaxNode = 128;
  static constexpr std::size_t kChunkBytes = 64 * 1024;
  struct FreeNode {
    FreeNode* next;
  };
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  std::array<FreeNode*, kMaxNode / kGranule + 1> free_{};
  std::vector<void*> chunks_;
  char* chunk_next_ = nullptr;
  std::size_t chunk_left_ = 0;
};

class DeviceArena {
 public:
  using Size = std::int64_t;
  using Offset = std::int64_t;
  static constexpr Size kAlignment = 512;

  explicit DeviceArena(Size capacity = 0);
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  /// Forgets every allocation and sets a new capacity; keeps the node pool for reuse.
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

  [[nodiscard]] Size capacity() const { return capacity_; }
  /// Aligned bytes of the blocks currently handed out.
  [[nodiscard]] Size live_bytes() const { return live_; }
  [[nodiscard]] Size peak_live_bytes() const { return peak_live_; }
  /// End of the highest block handed out now.
  [[nodiscard]] Size reserved_bytes() const;
  /// High-water mark of the end of any block handed out since reset: what a real arena must map.
  [[nodiscard]] Size peak_reserved_bytes() const { return peak_reserved_; }
  [[nodiscard]] Size largest_free_block() const;
  [[nodiscard]] std::size_t allocation_count() const { return allocated_.size(); }
  [[nodiscard]] std::size_t free_block_count() const { return free_by_offset_.size(); }

 private:
  void insert_free(Offset offset, Size size);
  void erase_free(std::pmr::map<Offset, Size>::iterator it);

  NodePool pool_;
  std::pmr::set<std::pair<Size, Offset>> free_by_size_{&pool_};
  std::pmr::map<Offset, Size> free_by_offset_{&pool_};
  std::pmr::unordered_map<Offset, Size> allocated_{&pool_};  // offset -> aligned size
  Size capacity_ = 0;
  Size live_ = 0;
  Size peak_live_ = 0;
  Size peak_reserved_ = 0;
};

}  // namespace memplan::sim
