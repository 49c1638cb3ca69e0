#include "memory/device_memory.hpp"

#include <algorithm>

namespace memplan::sim {

void DeviceMemory::reset(AllocatorModel model, Size capacity, const AllocatorConfig& config) {
  model_ = model;
  if (model == AllocatorModel::kArena) {
    arena_.reset(capacity);
  } else {
    caching_.reset(capacity, config);
  }
}

const std::vector<DeviceMemory::Segment>& DeviceMemory::segments_released() const {
  return model_ == AllocatorModel::kArena ? none_released_ : caching_.segments_released();
}

std::optional<DeviceMemory::Segment> DeviceMemory::segment_created() const {
  if (model_ == AllocatorModel::kArena) return std::nullopt;
  return caching_.segment_created();
}

const std::vector<CachingAllocator::PageChange>& DeviceMemory::pages_changed() const {
  return model_ == AllocatorModel::kArena ? no_pages_ : caching_.pages_changed();
}

DeviceMemory::Size DeviceMemory::segment_bytes(Segment s) const {
  return model_ == AllocatorModel::kArena ? arena_.capacity() : caching_.segment_bytes(s);
}

DeviceMemory::Size DeviceMemory::capacity() const {
  return model_ == AllocatorModel::kArena ? arena_.capacity() : caching_.capacity();
}

DeviceMemory::Size DeviceMemory::reserved_bytes() const {
  return model_ == AllocatorModel::kArena ? arena_.reserved_bytes() : caching_.reserved_bytes();
}

DeviceMemory::Size DeviceMemory::peak_reserved_bytes() const {
  return model_ == AllocatorModel::kArena ? arena_.peak_reserved_bytes()
                                          : caching_.peak_reserved_bytes();
}

DeviceMemory::Size DeviceMemory::largest_free_block() const {
  return model_ == AllocatorModel::kArena ? arena_.largest_free_block()
                                          : caching_.largest_free_block();
}

DeviceMemory::Shortfall DeviceMemory::shortfall(Size bytes) const {
  Shortfall s;
  s.largest_free_block = largest_free_block();
  if (model_ == AllocatorModel::kArena) {
    s.requested = DeviceArena::aligned_size(bytes);
    s.missing = std::max<Size>(0, s.requested - s.largest_free_block);
    return s;
  }
  s.caching = caching_.shortfall(bytes);
  s.requested = s.caching->requested;
  s.missing = s.caching->missing;
  return s;
}

}  // namespace memplan::sim
