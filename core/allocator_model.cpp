#include "core/allocator_model.hpp"

namespace memplan::sim {

std::string_view to_string(AllocatorModel model) {
  return model == AllocatorModel::kArena ? "arena" : "caching";
}

std::optional<AllocatorModel> parse_allocator_model(std::string_view name) {
  if (name == "arena") return AllocatorModel::kArena;
  if (name == "caching") return AllocatorModel::kCaching;
  return std::nullopt;
}

}  // namespace memplan::sim
