#pragma once
// DeviceMemory: the device memory of one run, under the allocator model the machine names
// (core/allocator_model.hpp): one DeviceArena region, or PyTorch's caching allocator's segments.
// The engine and the backends' ArenaDevice make the same calls on it, so they get the same
// placements and the same peaks whichever model it is.
//
// A block lives at an offset within a segment. Under the arena model there is one segment, 0, of
// the capacity, there from the start; under the caching model segments come and go with
// allocations (segments_released, segment_created), and a backend maps and unmaps real memory for
// each as PyTorch calls cudaMalloc and cudaFree.
#include <optional>
#include <vector>

#include "core/allocator_model.hpp"
#include "memory/caching_allocator.hpp"
#include "memory/device_arena.hpp"

namespace memplan::sim {

class DeviceMemory {
 public:
  using Size = std::int64_t;
  using Offset = std::int64_t;
  using Handle = std::int32_t;
  using Segment = std::int32_t;
  struct Placed {
    Segment segment;
    Offset offset;  // within the segment
    Handle handle;
    Size size;  // the block as the allocator hands it out (the request rounded, or more)
  };

  /// Forgets every allocation; the model, capacity and (caching model) configuration of the next
  /// run. Keeps buffers for reuse.
  void reset(AllocatorModel model, Size capacity, const AllocatorConfig& config = {});

  [[nodiscard]] std::optional<Placed> allocate(Size bytes) {
    if (model_ == AllocatorModel::kArena) {
      const auto placed = arena_.allocate_block(bytes);
      if (!placed) return std::nullopt;
      return Placed{0, placed->offset, placed->handle, DeviceArena::aligned_size(bytes)};
    }
    const auto placed = caching_.allocate(bytes);
    if (!placed) return std::nullopt;
    return Placed{placed->segment, placed->offset, placed->handle, placed->size};
  }
  void release(Handle handle) {
    if (model_ == AllocatorModel::kArena) {
      arena_.release_block(handle);
    } else {
      caching_.release(handle);
    }
  }

  [[nodiscard]] AllocatorModel model() const { return model_; }
  /// Segments the last allocate gave back and took (always none under the arena model).
  [[nodiscard]] const std::vector<Segment>& segments_released() const;
  [[nodiscard]] std::optional<Segment> segment_created() const;
  /// Pages of expandable segments the last allocate mapped and unmapped, in order (none under
  /// the arena model).
  [[nodiscard]] const std::vector<CachingAllocator::PageChange>& pages_changed() const;
  [[nodiscard]] Size segment_bytes(Segment s) const;

  [[nodiscard]] Size capacity() const;
  /// What the device must hold now: the arena's highest end in use, or the caching allocator's
  /// segments.
  [[nodiscard]] Size reserved_bytes() const;
  [[nodiscard]] Size peak_reserved_bytes() const;
  /// The largest request that would succeed now.
  [[nodiscard]] Size largest_free_block() const;

  /// Why a request of `bytes` fails now (what allocate's nullopt means), the one account of it
  /// the simulator's and the backends' out-of-memory reports and the search's replay give:
  /// `requested`, the request as the allocator rounds it; `missing`, what would have to be found
  /// for it (0 when it would succeed): under the arena, the request less the largest free block;
  /// under the caching allocator, what its new segment lacks (`caching`: the pools are separate,
  /// so a cached block of the other pool, however large, does not serve it).
  struct Shortfall {
    Size requested = 0;
    Size largest_free_block = 0;
    Size missing = 0;
    std::optional<CachingAllocator::Shortfall> caching;
  };
  [[nodiscard]] Shortfall shortfall(Size bytes) const;

 private:
  AllocatorModel model_ = AllocatorModel::kArena;
  DeviceArena arena_;
  CachingAllocator caching_;
  std::vector<Segment> none_released_;
  std::vector<CachingAllocator::PageChange> no_pages_;
};

}  // namespace memplan::sim
