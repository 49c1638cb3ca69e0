#pragma once
// AllocatorModel: which allocator hands out the device memory of a simulated step, and of the
// backends that run it (memory/device_memory.hpp). The frameworks the published policies ran in
// differ here, and the difference decides whether a plan at the edge of the device fits:
//   arena    one contiguous region of the device's capacity, best fit inside it
//            (memory/device_arena.hpp): cnmem's pool, which vDNN used, and the strict model in
//            which a hole between live blocks is lost until its neighbours are freed;
//   caching  PyTorch's CUDA caching allocator (memory/caching_allocator.hpp): segments
//            obtained from the driver one at a time, blocks split inside them, cached free
//            segments given back when a new segment would not fit, so only holes inside live
//            segments are lost.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace memplan::sim {

enum class AllocatorModel : std::uint8_t { kArena, kCaching };

/// "arena" or "caching", as trace files and the `--allocator` flag spell it.
std::string_view to_string(AllocatorModel model);
/// The model `name` spells; nullopt when it spells none.
std::optional<AllocatorModel> parse_allocator_model(std::string_view name);

/// The caching allocator's configuration, as PyTorch takes it from PYTORCH_CUDA_ALLOC_CONF (c10's
/// CUDAAllocatorConfig); the default is PyTorch's default. What each does to the model:
/// memory/caching_allocator.hpp.
struct AllocatorConfig {
  static constexpr std::int64_t kNoMaxSplit = std::numeric_limits<std::int64_t>::max();
  static constexpr std::size_t kRoundupIntervals = 16;  // [0, 2 MiB), [2, 4), ..., [32 GiB, ...)

  std::int64_t max_split_size = kNoMaxSplit;  // bytes
  /// Divisions per power-of-two interval of request sizes, from [0, 2 MiB) (index 0) up to
  /// [32 GiB, ...) (index 15); 0 or 1: none.
  std::array<std::int64_t, kRoundupIntervals> roundup_power2_divisions{};
  bool expandable_segments = false;
  /// A share of the device's memory; 0: no garbage collection.
  double garbage_collection_threshold = 0;

  bool operator==(const AllocatorConfig&) const = default;
};

/// The configuration a PYTORCH_CUDA_ALLOC_CONF string gives ("expandable_segments:True,
/// max_split_size_mb:128", "roundup_power2_divisions:[256:1,512:2,>:4]",
/// "garbage_collection_threshold:0.6"), checked as c10 checks it: max_split_size_mb over 20,
/// divisions and their intervals powers of two, a threshold strictly between 0 and 1. Options that
/// do not change the device allocator's placements (pinned host memory's) are accepted; the
/// cudaMallocAsync backend and unknown options are refused. Throws InputError naming `flag`.
AllocatorConfig parse_alloc_conf(std::string_view text, std::string_view flag);
/// PYTORCH_CUDA_ALLOC_CONF's spelling of what differs from the default ("" for the default).
std::string to_string(const AllocatorConfig& config);

}  // namespace memplan::sim
