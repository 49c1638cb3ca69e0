#pragma once
// Gist's encodings of feature maps (Jain et al., ISCA 2018), implemented for real on host memory:
// - binarize (lossless for its use): a ReLU output that only feeds a max-pool is needed in backward
//   only for its sign (ReLU backward), so one bit per value is kept; decode writes 1.0 / 0.0, which
//   gives ReLU backward bitwise the same gradient.
// - sparse (lossless): blocks of 256 values stored as a 16-bit count and (8-bit index, value)
//   pairs, Gist's "sparse storage, dense compute" with narrow indices; pays off above ~20% zeros.
// - delayed precision reduction (lossy): values narrowed to a small float — fp16 (1 sign, 5
//   exponent, 10 mantissa bits, IEEE half), fp10 (1, 5, 4), fp8 (1, 4, 3) — rounded to nearest
//   even, saturating at the largest finite value, packed as a bit stream.
// Buffer sizes are decided before the data is seen (the plan must know them), so encoders write
// into a caller-sized buffer and report when the data does not fit.
#include <cstddef>
#include <cstdint>

namespace memplan::host_backend {

// ---- binarize ---------------------------------------------------------------------------------
constexpr std::int64_t binarize_bytes(std::int64_t n) {
  return (n + 7) / 8;
}
void binarize_encode(std::int64_t n, const float* x, std::uint8_t* bits);
void binarize_decode(std::int64_t n, const std::uint8_t* bits, float* x);

// ---- sparse -------------------------------------------------------------------------------------
inline constexpr std::int64_t kSparseBlock = 256;
/// Bytes needed for n values of which `nonzeros` are not zero.
constexpr std::int64_t sparse_bytes(std::int64_t n, std::int64_t nonzeros) {
  return ((n + kSparseBlock - 1) / kSparseBlock) * 2 + nonzeros * 5;
}
std::int64_t count_nonzeros(std::int64_t n, const float* x);
/// Encodes into `out` of `capacity` bytes; returns the bytes used, or -1 when they do not fit.
std::int64_t sparse_encode(std::int64_t n, const float* x, std::uint8_t* out,
                           std::int64_t capacity);
void sparse_decode(std::int64_t n, const std::uint8_t* in, float* x);

// ---- narrow floats ------------------------------------------------------------------------------
struct NarrowFloat {
  int exponent_bits;
  int mantissa_bits;
  [[nodiscard]] constexpr int bits() const { return 1 + exponent_bits + mantissa_bits; }
};
inline constexpr NarrowFloat kFp16{5, 10};
inline constexpr NarrowFloat kFp10{5, 4};
inline constexpr NarrowFloat kFp8{4, 3};

constexpr std::int64_t narrow_bytes(NarrowFloat f, std::int64_t n) {
  return (n * f.bits() + 7) / 8;
}
/// The code of one value (low `f.bits()` bits) and back; exposed for tests.
std::uint32_t narrow_encode_value(NarrowFloat f, float value);
float narrow_decode_value(NarrowFloat f, std::uint32_t code);
/// Largest relative rounding error for normal values: 2^-(mantissa_bits+1).
double narrow_relative_error(NarrowFloat f);
void narrow_encode(NarrowFloat f, std::int64_t n, const float* x, std::uint8_t* out);
void narrow_decode(NarrowFloat f, std::int64_t n, const std::uint8_t* in, float* x);

}  // namespace memplan::host_backend
