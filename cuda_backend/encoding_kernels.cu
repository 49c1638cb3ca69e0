// The CUDA backend's kernels for Gist's encodings (kernels.cuh): binarize, sparse blocks and
// narrow floats, in the host backend's byte layouts (host_backend/encodings.hpp), so a map
// encoded on one backend decodes on the other.
#include <cmath>
#include <cstdint>

#include "cuda_backend/kernel_launch.cuh"
#include "cuda_backend/kernels.cuh"

namespace memplan::cuda_backend::kernels {

namespace {

constexpr std::int64_t kSparseBlock = 256;  // host_backend::kSparseBlock

// ---- binarize
// -------------------------------------------------------------------------------------

__global__ void binarize_encode_kernel(std::int64_t n, const float* x, std::uint8_t* bits) {
  MEMPLAN_GRID_STRIDE(byte, (n + 7) / 8) {
    unsigned v = 0;
    for (int b = 0; b < 8; ++b) {
      const std::int64_t i = byte * 8 + b;
      if (i < n && x[i] > 0.0f) v |= 1u << b;
    }
    bits[byte] = static_cast<std::uint8_t>(v);
  }
}

__global__ void binarize_decode_kernel(std::int64_t n, const std::uint8_t* bits, float* x) {
  MEMPLAN_GRID_STRIDE(i, n) {
    x[i] = ((bits[i / 8] >> (i % 8)) & 1u) != 0 ? 1.0f : 0.0f;
  }
}

// ---- sparse
// ---------------------------------------------------------------------------------------

__device__ bool kept(float v) {
  return !(v == 0.0f && !signbit(v));  // -0.0 is kept so that decoding is bitwise exact
}

__global__ void sparse_count_kernel(std::int64_t n, const float* x, std::int64_t* counts) {
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    const std::int64_t end = min(n, (k + 1) * kSparseBlock);
    std::int64_t c = 0;
    for (std::int64_t i = k * kSparseBlock; i < end; ++i) c += kept(x[i]) ? 1 : 0;
    counts[k] = c;
  }
}

/// One thread: the byte offset of every block, and whether the whole fits.
__global__ void sparse_offsets_kernel(std::int64_t blocks, const std::int64_t* counts,
                                      std::int64_t* offsets, std::int64_t capacity, int* overflow) {
  std::int64_t pos = 0;
  for (std::int64_t k = 0; k < blocks; ++k) {
    offsets[k] = pos;
    pos += 2 + 5 * counts[k];
  }
  *overflow = pos > capacity ? 1 : 0;
}

__global__ void sparse_write_kernel(std::int64_t n, const float* x, const std::int64_t* counts,
                                    const std::int64_t* offsets, const int* overflow,
                                    std::uint8_t* out) {
  if (*overflow != 0) return;
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    std::uint8_t* p = out + offsets[k];
    const auto count = static_cast<unsigned>(counts[k]);
    p[0] = static_cast<std::uint8_t>(count & 0xffu);  // little-endian 16-bit count
    p[1] = static_cast<std::uint8_t>(count >> 8);
    p += 2;
    const std::int64_t start = k * kSparseBlock;
    const std::int64_t end = min(n, start + kSparseBlock);
    for (std::int64_t i = start; i < end; ++i) {
      if (!kept(x[i])) continue;
      const unsigned bits = __float_as_uint(x[i]);
      p[0] = static_cast<std::uint8_t>(i - start);
      for (int b = 0; b < 4; ++b) p[1 + b] = static_cast<std::uint8_t>(bits >> (8 * b));
      p += 5;
    }
  }
}

__global__ void zero_kernel(std::int64_t n, float* x) {
  MEMPLAN_GRID_STRIDE(i, n) {
    x[i] = 0.0f;
  }
}

/// One thread: where each block starts in the packed stream (its counts are in the stream).
__global__ void sparse_read_offsets_kernel(std::int64_t blocks, const std::uint8_t* in,
                                           std::int64_t* offsets) {
  std::int64_t pos = 0;
  for (std::int64_t k = 0; k < blocks; ++k) {
    offsets[k] = pos;
    const unsigned count = in[pos] | (static_cast<unsigned>(in[pos + 1]) << 8);
    pos += 2 + 5 * static_cast<std::int64_t>(count);
  }
}

__global__ void sparse_scatter_kernel(std::int64_t n, const std::uint8_t* in,
                                      const std::int64_t* offsets, float* x) {
  MEMPLAN_GRID_STRIDE(k, (n + kSparseBlock - 1) / kSparseBlock) {
    const std::uint8_t* p = in + offsets[k];
    const unsigned count = p[0] | (static_cast<unsigned>(p[1]) << 8);
    p += 2;
    for (unsigned c = 0; c < count; ++c, p += 5) {
      unsigned bits = 0;
      for (int b = 0; b < 4; ++b) bits |= static_cast<unsigned>(p[1 + b]) << (8 * b);
      x[k * kSparseBlock + p[0]] = __uint_as_float(bits);
    }
  }
}

// ---- narrow floats (host_backend::narrow_encode_value / narrow_decode_value)
// ---------------------

__device__ unsigned narrow_code(int exponent_bits, int mantissa_bits, float value) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const unsigned exp_all_ones = (1u << exponent_bits) - 1;
  const unsigned sign = signbit(value) ? 1u << (total - 1) : 0u;
  if (isnan(value)) return (exp_all_ones << mantissa_bits) | 1u;
  if (isinf(value)) return sign | (exp_all_ones << mantissa_bits);
  const double a = fabs(static_cast<double>(value));
  if (a == 0.0) return sign;
  const int min_exponent = 1 - bias;
  const int max_exponent = bias;
  const double max_finite = ldexp(2.0 - ldexp(1.0, -mantissa_bits), max_exponent);
  int exponent = max(ilogb(a), min_exponent);
  const double quantum = ldexp(1.0, exponent - mantissa_bits);
  double q = rint(a / quantum) * quantum;  // nearest, ties to even; exact in double
  if (q > max_finite) q = max_finite;
  if (q == 0.0) return sign;
  const int e = ilogb(q);
  unsigned exponent_field = 0;
  unsigned mantissa = 0;
  if (e < min_exponent) {
    mantissa = static_cast<unsigned>(ldexp(q, mantissa_bits - min_exponent));
  } else {
    exponent_field = static_cast<unsigned>(e + bias);
    mantissa = static_cast<unsigned>(ldexp(q, mantissa_bits - e)) - (1u << mantissa_bits);
  }
  return sign | (exponent_field << mantissa_bits) | mantissa;
}

__device__ float narrow_value(int exponent_bits, int mantissa_bits, unsigned code) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const unsigned exp_all_ones = (1u << exponent_bits) - 1;
  const bool negative = ((code >> (total - 1)) & 1u) != 0;
  const unsigned exponent_field = (code >> mantissa_bits) & exp_all_ones;
  const unsigned mantissa = code & ((1u << mantissa_bits) - 1);
  double v = 0.0;
  if (exponent_field == exp_all_ones) {
    v = mantissa != 0 ? nan("") : INFINITY;
  } else if (exponent_field == 0) {
    v = ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    v = ldexp(static_cast<double>(mantissa + (1u << mantissa_bits)),
              static_cast<int>(exponent_field) - bias - mantissa_bits);
  }
  return static_cast<float>(negative ? -v : v);
}

/// One thread per output byte: it gathers the bits of the (at most two) values overlapping it.
__global__ void narrow_encode_kernel(int exponent_bits, int mantissa_bits, std::int64_t n,
                                     const float* x, std::uint8_t* out) {
  const int width = 1 + exponent_bits + mantissa_bits;
  MEMPLAN_GRID_STRIDE(byte, (n * width + 7) / 8) {
    unsigned v = 0;
    std::int64_t cached = -1;
    unsigned code = 0;
    for (int b = 0; b < 8; ++b) {
      const std::int64_t bit = byte * 8 + b;
      const std::int64_t i = bit / width;
      if (i >= n) break;
      if (i != cached) {
        code = narrow_code(exponent_bits, mantissa_bits, x[i]);
        cached = i;
      }
      if (((code >> (bit % width)) & 1u) != 0) v |= 1u << b;
    }
    out[byte] = static_cast<std::uint8_t>(v);
  }
}

__global__ void narrow_decode_kernel(int exponent_bits, int mantissa_bits, std::int64_t n,
                                     const std::uint8_t* in, float* x) {
  const int width = 1 + exponent_bits + mantissa_bits;
  MEMPLAN_GRID_STRIDE(i, n) {
    unsigned code = 0;
    for (int b = 0; b < width; ++b) {
      const std::int64_t bit = i * width + b;
      code |= static_cast<unsigned>((in[bit / 8] >> (bit % 8)) & 1u) << b;
    }
    x[i] = narrow_value(exponent_bits, mantissa_bits, code);
  }
}

}  // namespace

cudaError_t binarize_encode(cudaStream_t s, std::int64_t n, const float* x, std::uint8_t* bits) {
  binarize_encode_kernel<<<blocks_for((n + 7) / 8), kThreads, 0, s>>>(n, x, bits);
  return cudaGetLastError();
}

cudaError_t binarize_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* bits, float* x) {
  binarize_decode_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, bits, x);
  return cudaGetLastError();
}

std::int64_t sparse_scratch_bytes(std::int64_t n) {
  return 2 * ((n + kSparseBlock - 1) / kSparseBlock) *
         static_cast<std::int64_t>(sizeof(std::int64_t));
}

cudaError_t sparse_encode(cudaStream_t s, std::int64_t n, const float* x, std::uint8_t* out,
                          std::int64_t capacity, void* scratch, int* overflow) {
  const std::int64_t blocks = (n + kSparseBlock - 1) / kSparseBlock;
  auto* counts = static_cast<std::int64_t*>(scratch);
  std::int64_t* offsets = counts + blocks;
  sparse_count_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, x, counts);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_offsets_kernel<<<1, 1, 0, s>>>(blocks, counts, offsets, capacity, overflow);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_write_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, x, counts, offsets, overflow, out);
  return cudaGetLastError();
}

cudaError_t sparse_decode(cudaStream_t s, std::int64_t n, const std::uint8_t* in, float* x,
                          void* scratch) {
  const std::int64_t blocks = (n + kSparseBlock - 1) / kSparseBlock;
  auto* offsets = static_cast<std::int64_t*>(scratch);
  zero_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, x);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_read_offsets_kernel<<<1, 1, 0, s>>>(blocks, in, offsets);
  MEMPLAN_RETURN_IF_LAUNCH_FAILED();
  sparse_scatter_kernel<<<blocks_for(blocks), kThreads, 0, s>>>(n, in, offsets, x);
  return cudaGetLastError();
}

cudaError_t narrow_encode(cudaStream_t s, int exponent_bits, int mantissa_bits, std::int64_t n,
                          const float* x, std::uint8_t* out) {
  const std::int64_t bytes = (n * (1 + exponent_bits + mantissa_bits) + 7) / 8;
  narrow_encode_kernel<<<blocks_for(bytes), kThreads, 0, s>>>(exponent_bits, mantissa_bits, n, x,
                                                              out);
  return cudaGetLastError();
}

cudaError_t narrow_decode(cudaStream_t s, int exponent_bits, int mantissa_bits, std::int64_t n,
                          const std::uint8_t* in, float* x) {
  narrow_decode_kernel<<<blocks_for(n), kThreads, 0, s>>>(exponent_bits, mantissa_bits, n, in, x);
  return cudaGetLastError();
}

}  // namespace memplan::cuda_backend::kernels
