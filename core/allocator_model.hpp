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
#include <cstdint>
#include <optional>
#include <string_view>

namespace memplan::sim {

enum class AllocatorModel : std::uint8_t { kArena, kCaching };

/// "arena" or "caching", as trace files and the `--allocator` flag spell it.
std::string_view to_string(AllocatorModel model);
/// The model `name` spells; nullopt when it spells none.
std::optional<AllocatorModel> parse_allocator_model(std::string_view name);

}  // namespace memplan::sim
