#pragma once
// The byte layouts of Gist's encodings as every backend writes them (host_backend/encodings.hpp on
// the CPU, cuda_backend/kernels.cuh on a GPU), so that both size their output the same way:
// binarize one bit per value; fp16, fp10 and fp8 (sim::NarrowFormat) a packed bit stream of
// 1 + exponent + mantissa bits per value; sparse sim's Note [Sparse format] (its size depends on
// the data: checked when encoding, not before).
#include <cstdint>

#include "core/plan.hpp"

namespace memplan::runtime {

using NarrowFloat = sim::NarrowFormat;  // the formats, and so the plan's sizes, are sim's
inline constexpr NarrowFloat kFp16 = sim::kFp16Format;
inline constexpr NarrowFloat kFp10 = sim::kFp10Format;
inline constexpr NarrowFloat kFp8 = sim::kFp8Format;

constexpr std::int64_t binarize_bytes(std::int64_t n) {
  return (n + 7) / 8;
}
constexpr std::int64_t narrow_bytes(NarrowFloat f, std::int64_t n) {
  return (n * f.bits() + 7) / 8;
}

/// Bytes an encoder writes for `n` float32 values: exact for binarize and the narrow floats;
/// 0 for sparse and none (a sparse encoding's size is known only once the data is seen).
constexpr std::int64_t encoded_bytes_written(sim::Encoding encoding, std::int64_t n) {
  switch (encoding) {
    case sim::Encoding::kBinarize:
      return binarize_bytes(n);
    case sim::Encoding::kFp16:
      return narrow_bytes(kFp16, n);
    case sim::Encoding::kFp10:
      return narrow_bytes(kFp10, n);
    case sim::Encoding::kFp8:
      return narrow_bytes(kFp8, n);
    case sim::Encoding::kSparse:
    case sim::Encoding::kNone:
      return 0;
  }
  return 0;
}

}  // namespace memplan::runtime
