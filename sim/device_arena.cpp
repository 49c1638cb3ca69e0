#include "sim/device_arena.hpp"

#include <algorithm>

#include "sim/check.hpp"

namespace memplan::sim {

NodePool::~NodePool() {
  for (void* chunk : chunks_) ::operator delete(chunk);
}

void* NodePool::do_allocate(std::size_t bytes, std::size_t alignment) {
  MEMPLAN_CHECK(alignment <= kGranule, "tree nodes need at most 16-byte alignment");
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
  if (size > kMaxNode) return ::operator new(bytes);
  FreeNode*& head = free_[size / kGranule];
  if (head != nullptr) {
    FreeNode* node = head;
    head = node->next;
    return node;
  }
  if (chunk_left_ < size) {
    chunks_.push_back(::operator new(kChunkBytes));
    chunk_next_ = static_cast<char*>(chunks_.back());
    chunk_left_ = kChunkBytes;
  }
  void* node = chunk_next_;
  chunk_next_ += size;
  chunk_left_ -= size;
  return node;
}

void NodePool::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  (void)alignment;
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
  if (size > kMaxNode) {
    ::operator delete(p);
    return;
  }
  auto* node = static_cast<FreeNode*>(p);
  node->next = free_[size / kGranule];
  free_[size / kGranule] = node;
}

DeviceArena::DeviceArena(Size capacity) {
  reset(capacity);
}

void DeviceArena::reset(Size capacity) {
  MEMPLAN_CHECK(capacity >= 0, "an arena's capacity is not negative");
  free_by_size_.clear();
  free_by_offset_.clear();
  allocated_.clear();
  capacity_ = capacity / kAlignment * kAlignment;
  live_ = 0;
  peak_live_ = 0;
  peak_reserved_ = 0;
  if (capacity_ > 0) insert_free(0, capacity_);
}

void DeviceArena::insert_free(Offset offset, Size size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void DeviceArena::erase_free(std::pmr::map<Offset, Size>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

std::optional<DeviceArena::Offset> DeviceArena::allocate(Size bytes) {
  const Size size = aligned_size(bytes);
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [block_size, offset] = *fit;
  auto by_offset = free_by_offset_.find(offset);
  if (block_size > size) {
    // The remainder keeps both tree nodes: re-keyed, not freed and allocated again. By offset it
    // stays between the same neighbours, so the old position is an exact hint.
    auto size_node = free_by_size_.extract(fit);
    size_node.value() = {block_size - size, offset + size};
    free_by_size_.insert(std::move(size_node));
    const auto hint = std::next(by_offset);
    auto offset_node = free_by_offset_.extract(by_offset);
    offset_node.key() = offset + size;
    offset_node.mapped() = block_size - size;
    free_by_offset_.insert(hint, std::move(offset_node));
  } else {
    free_by_size_.erase(fit);
    free_by_offset_.erase(by_offset);
  }
  allocated_.emplace(offset, size);
  live_ += size;
  if (live_ > peak_live_) peak_live_ = live_;
  if (offset + size > peak_reserved_) peak_reserved_ = offset + size;
  return offset;
}

void DeviceArena::release(Offset offset) {
  auto it = allocated_.find(offset);
  MEMPLAN_CHECK(it != allocated_.end(), "only a block that is handed out can be released");
  Offset start = offset;
  Size size = it->second;
  allocated_.erase(it);
  live_ -= size;
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    auto after = std::next(next);
    erase_free(next);
    next = after;
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, size);
}

DeviceArena::Size DeviceArena::reserved_bytes() const {
  // Everything above the last block in use is one free block that ends at the capacity.
  if (free_by_offset_.empty()) return capacity_;
  const auto& [offset, size] = *free_by_offset_.rbegin();
  return offset + size == capacity_ ? offset : capacity_;
}

DeviceArena::Size DeviceArena::largest_free_block() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace memplan::sim
