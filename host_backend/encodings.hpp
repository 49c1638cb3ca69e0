#pragma once
// Gist's encodings of feature maps (Jain et al., ISCA 2018), implemented for real on host memory:
// - binarize (lossless for its use): a ReLU output that only feeds a max-pool is needed in backward
//   only for its sign (ReLU backward), so one bit per value is kept; decode writes 1.0 / 0.0, which
//   gives ReLU backward bitwise the same gradient.
// - sparse (lossless): blocks of 256 values stored as a 16-bit count and (8-bit index, value)
//   pairs, Gist's "sparse storage, dense compute" with narrow indices; pays off above ~20% zeros.
//   The format and its size are sim's (Note [Sparse format] in core/plan.hpp), so the plan's
//   buffer and the bytes written here are the same formula.
// - delayed precision reduction (lossy): values narrowed to a small float — fp16 (1 sign, 5
//   exponent, 10 mantissa bits, IEEE half), fp10 (1, 5, 4), fp8 (1, 4, 3) — rounded to nearest
//   even, saturating at the largest finite value, packed as a bit stream.
// Buffer sizes are decided before the data is seen (the plan must know them), so encoders write
// into a caller-sized buffer; a sparse map denser than its buffer spills the rest of its encoding
// to host memory (sparse_encode_spilling).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/plan.hpp"
#include "runtime/encoded_formats.hpp"

namespace memplan::host_backend {

// ---- binarize ---------------------------------------------------------------------------------
using runtime::binarize_bytes;
void binarize_encode(std::int64_t n, const float* x, std::uint8_t* bits);
void binarize_decode(std::int64_t n, const std::uint8_t* bits, float* x);

// ---- sparse -------------------------------------------------------------------------------------
inline constexpr std::int64_t kSparseBlock = sim::kSparseBlockValues;
/// Bytes needed for n values of which `nonzeros` are stored (sim::sparse_format_bytes).
constexpr std::int64_t sparse_bytes(std::int64_t n, std::int64_t nonzeros) {
  return sim::sparse_format_bytes(n, nonzeros);
}
/// Values the sparse format stores: all but +0.0.
std::int64_t count_nonzeros(std::int64_t n, const float* x);
/// Encodes into `out` of `capacity` bytes; returns the bytes used, or -1 when they do not fit.
std::int64_t sparse_encode(std::int64_t n, const float* x, std::uint8_t* out,
                           std::int64_t capacity);
void sparse_decode(std::int64_t n, const std::uint8_t* in, float* x);
/// Encodes into `out` of `capacity` bytes (device memory) and, when the encoding is longer, its
/// remaining bytes into `spill` (host memory; emptied when everything fits). Returns the bytes
/// of the whole encoding.
std::int64_t sparse_encode_spilling(std::int64_t n, const float* x, std::uint8_t* out,
                                    std::int64_t capacity, std::vector<std::uint8_t>& spill);
/// Decodes what sparse_encode_spilling wrote: `capacity` bytes at `in`, then `spill`.
void sparse_decode_spilled(std::int64_t n, const std::uint8_t* in, std::int64_t capacity,
                           const std::vector<std::uint8_t>& spill, float* x);

// ---- narrow floats ------------------------------------------------------------------------------
using runtime::kFp10;
using runtime::kFp16;
using runtime::kFp8;
using runtime::narrow_bytes;
using runtime::NarrowFloat;  // the byte layouts are runtime/encoded_formats.hpp's
/// The code of one value (low `f.bits()` bits) and back; exposed for tests.
std::uint32_t narrow_encode_value(NarrowFloat f, float value);
float narrow_decode_value(NarrowFloat f, std::uint32_t code);
/// Largest relative rounding error for normal values: 2^-(mantissa_bits+1).
double narrow_relative_error(NarrowFloat f);
void narrow_encode(NarrowFloat f, std::int64_t n, const float* x, std::uint8_t* out);
void narrow_decode(NarrowFloat f, std::int64_t n, const std::uint8_t* in, float* x);

}  // namespace memplan::host_backend
