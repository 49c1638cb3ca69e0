#include "host_backend/encodings.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.hpp"

namespace memplan::host_backend {

void binarize_encode(std::int64_t n, const float* x, std::uint8_t* bits) {
  std::fill(bits, bits + binarize_bytes(n), std::uint8_t{0});
  for (std::int64_t i = 0; i < n; ++i) {
    if (x[i] > 0.0f) bits[i / 8] = static_cast<std::uint8_t>(bits[i / 8] | (1u << (i % 8)));
  }
}

void binarize_decode(std::int64_t n, const std::uint8_t* bits, float* x) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = ((bits[i / 8] >> (i % 8)) & 1u) != 0 ? 1.0f : 0.0f;
}

std::int64_t count_nonzeros(std::int64_t n, const float* x) {
  return std::count_if(x, x + n, [](float v) { return v != 0.0f || std::signbit(v); });
}

std::int64_t sparse_encode(std::int64_t n, const float* x, std::uint8_t* out,
                           std::int64_t capacity) {
  std::int64_t pos = 0;
  for (std::int64_t start = 0; start < n; start += kSparseBlock) {
    const std::int64_t end = std::min(n, start + kSparseBlock);
    const std::int64_t count_pos = pos;
    pos += 2;
    if (pos > capacity) return -1;
    std::uint16_t count = 0;
    for (std::int64_t i = start; i < end; ++i) {
      // -0.0 is kept as a value so that decoding is bitwise exact.
      if (x[i] == 0.0f && !std::signbit(x[i])) continue;
      if (pos + 5 > capacity) return -1;
      out[pos] = static_cast<std::uint8_t>(i - start);
      std::memcpy(out + pos + 1, &x[i], 4);
      pos += 5;
      ++count;
    }
    std::memcpy(out + count_pos, &count, 2);
  }
  return pos;
}

void sparse_decode(std::int64_t n, const std::uint8_t* in, float* x) {
  std::fill(x, x + n, 0.0f);
  std::int64_t pos = 0;
  for (std::int64_t start = 0; start < n; start += kSparseBlock) {
    std::uint16_t count = 0;
    std::memcpy(&count, in + pos, 2);
    pos += 2;
    for (std::uint16_t k = 0; k < count; ++k, pos += 5)
      std::memcpy(&x[start + in[pos]], in + pos + 1, 4);
  }
}

std::int64_t sparse_encode_spilling(std::int64_t n, const float* x, std::uint8_t* out,
                                    std::int64_t capacity, std::vector<std::uint8_t>& spill) {
  spill.clear();
  const std::int64_t used = sparse_encode(n, x, out, capacity);
  if (used >= 0) return used;
  std::vector<std::uint8_t> whole(static_cast<std::size_t>(sparse_bytes(n, count_nonzeros(n, x))));
  const auto total = static_cast<std::int64_t>(whole.size());
  MEMPLAN_CHECK(sparse_encode(n, x, whole.data(), total) == total,
                "the sparse format takes sparse_bytes(n, non-zeros)");
  std::copy(whole.begin(), whole.begin() + capacity, out);
  spill.assign(whole.begin() + capacity, whole.end());
  return total;
}

void sparse_decode_spilled(std::int64_t n, const std::uint8_t* in, std::int64_t capacity,
                           const std::vector<std::uint8_t>& spill, float* x) {
  if (spill.empty()) {
    sparse_decode(n, in, x);
    return;
  }
  std::vector<std::uint8_t> whole(in, in + capacity);
  whole.insert(whole.end(), spill.begin(), spill.end());
  sparse_decode(n, whole.data(), x);
}

std::uint32_t narrow_encode_value(NarrowFloat f, float value) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const std::uint32_t exp_all_ones = (1u << f.exponent_bits) - 1;
  const std::uint32_t sign = std::signbit(value) ? 1u << (f.bits() - 1) : 0u;
  if (std::isnan(value)) return (exp_all_ones << f.mantissa_bits) | 1u;
  if (std::isinf(value)) return sign | (exp_all_ones << f.mantissa_bits);
  const double a = std::fabs(static_cast<double>(value));
  if (a == 0.0) return sign;
  const int min_exponent = 1 - bias;
  const int max_exponent = bias;  // the all-ones exponent is reserved for inf and NaN
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -f.mantissa_bits), max_exponent);
  int exponent = std::ilogb(a);
  exponent = std::max(exponent, min_exponent);
  // Round to a multiple of the quantum of this binade (nearest, ties to even); exact in double.
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  double q = std::nearbyint(a / quantum) * quantum;
  if (q > max_finite) q = max_finite;  // saturate: DPR narrows stashed values, never to infinity
  if (q == 0.0) return sign;
  int e = std::ilogb(q);
  std::uint32_t exponent_field = 0;
  std::uint32_t mantissa = 0;
  if (e < min_exponent) {  // subnormal
    mantissa = static_cast<std::uint32_t>(std::ldexp(q, f.mantissa_bits - min_exponent));
  } else {
    exponent_field = static_cast<std::uint32_t>(e + bias);
    mantissa =
        static_cast<std::uint32_t>(std::ldexp(q, f.mantissa_bits - e)) - (1u << f.mantissa_bits);
  }
  return sign | (exponent_field << f.mantissa_bits) | mantissa;
}

float narrow_decode_value(NarrowFloat f, std::uint32_t code) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const std::uint32_t exp_all_ones = (1u << f.exponent_bits) - 1;
  const bool negative = ((code >> (f.bits() - 1)) & 1u) != 0;
  const std::uint32_t exponent_field = (code >> f.mantissa_bits) & exp_all_ones;
  const std::uint32_t mantissa = code & ((1u << f.mantissa_bits) - 1);
  double v = 0.0;
  if (exponent_field == exp_all_ones) {
    v = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                      : std::numeric_limits<double>::infinity();
  } else if (exponent_field == 0) {
    v = std::ldexp(static_cast<double>(mantissa), 1 - bias - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<double>(mantissa + (1u << f.mantissa_bits)),
                   static_cast<int>(exponent_field) - bias - f.mantissa_bits);
  }
  return static_cast<float>(negative ? -v : v);
}

double narrow_relative_error(NarrowFloat f) {
  return std::ldexp(1.0, -(f.mantissa_bits + 1));
}

void narrow_encode(NarrowFloat f, std::int64_t n, const float* x, std::uint8_t* out) {
  std::fill(out, out + narrow_bytes(f, n), std::uint8_t{0});
  std::int64_t bit = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t code = narrow_encode_value(f, x[i]);
    for (int b = 0; b < f.bits(); ++b, ++bit) {
      if (((code >> b) & 1u) != 0)
        out[bit / 8] = static_cast<std::uint8_t>(out[bit / 8] | (1u << (bit % 8)));
    }
  }
}

void narrow_decode(NarrowFloat f, std::int64_t n, const std::uint8_t* in, float* x) {
  std::int64_t bit = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t code = 0;
    for (int b = 0; b < f.bits(); ++b, ++bit)
      code |= static_cast<std::uint32_t>((in[bit / 8] >> (bit % 8)) & 1u) << b;
    x[i] = narrow_decode_value(f, code);
  }
}

}  // namespace memplan::host_backend
