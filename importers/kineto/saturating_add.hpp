#pragma once
// saturating_add: sums of event times and sizes from an untrusted trace. A corrupt trace with
// millions of huge events must end in an error (validate() refuses ops over an hour or tensors
// over 1 PiB), never in a signed overflow; saturating at 2^60 keeps every sum representable.
#include <algorithm>
#include <cstdint>

namespace memplan::importers {

inline constexpr std::int64_t kSaturation = std::int64_t{1} << 60;

constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  a = std::clamp(a, -kSaturation, kSaturation);
  b = std::clamp(b, -kSaturation, kSaturation);
  return std::clamp(a + b, -kSaturation, kSaturation);
}

}  // namespace memplan::importers
