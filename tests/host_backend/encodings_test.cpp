#include <cstring>
#include <limits>

#include <catch2/catch.hpp>

#include "host_backend/encodings.hpp"
#include "host_backend/layer_kernels.hpp"
#include "tests/host_backend/gradient_check.hpp"

using namespace memplan::host_backend;
using memplan::test::random_vector;

namespace {
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("binarize keeps exactly what ReLU backward needs, in 1/32 of the bytes",
          "[host_backend][gist]") {
  auto y = random_vector(1001, 51);
  relu_forward(1001, y.data(), y.data());
  std::vector<std::uint8_t> bits(static_cast<std::size_t>(binarize_bytes(1001)));
  CHECK(bits.size() == 126);
  binarize_encode(1001, y.data(), bits.data());
  std::vector<float> decoded(1001);
  binarize_decode(1001, bits.data(), decoded.data());
  const auto dy = random_vector(1001, 52);
  std::vector<float> dx_full(1001), dx_decoded(1001);
  relu_backward(1001, dy.data(), y.data(), dx_full.data());
  relu_backward(1001, dy.data(), decoded.data(), dx_decoded.data());
  CHECK(bitwise_equal(dx_full, dx_decoded));
}

TEST_CASE("sparse storage is lossless and sized by the zeros", "[host_backend][gist]") {
  auto x = random_vector(1000, 53);
  relu_forward(1000, x.data(), x.data());  // about half zeros
  x[7] = -0.0f;                            // a negative zero survives bit for bit
  const auto nnz = count_nonzeros(1000, x.data());
  const auto bytes = sparse_bytes(1000, nnz);
  CHECK(bytes < 1000 * 4);
  std::vector<std::uint8_t> buffer(static_cast<std::size_t>(bytes));
  CHECK(sparse_encode(1000, x.data(), buffer.data(), bytes) == bytes);
  std::vector<float> decoded(1000);
  sparse_decode(1000, buffer.data(), decoded.data());
  CHECK(bitwise_equal(x, decoded));
  CHECK(sparse_encode(1000, x.data(), buffer.data(), bytes - 1) == -1);
  // Dense data does not pay off: 5 bytes per value plus block headers.
  CHECK(sparse_bytes(1000, 1000) > 4000);
}

TEST_CASE("the plan's sparse buffer is the format's size, denser data spills to host memory",
          "[host_backend][gist]") {
  // A map of 1000 values exactly half stored fits the buffer the plan gives it to the byte.
  memplan::sim::Tensor t;
  t.bytes = 4000;
  t.dtype = "float32";
  const auto planned = memplan::sim::encoded_bytes(memplan::sim::Encoding::kSparse, t);
  std::vector<float> half(1000, 0.0f);
  for (std::size_t i = 0; i < 1000; i += 2) half[i] = 1.0f + static_cast<float>(i);
  CHECK(sparse_bytes(1000, count_nonzeros(1000, half.data())) == planned);
  std::vector<std::uint8_t> device(static_cast<std::size_t>(planned));
  std::vector<std::uint8_t> spill{1, 2, 3};  // emptied when everything fits
  CHECK(sparse_encode_spilling(1000, half.data(), device.data(), planned, spill) == planned);
  CHECK(spill.empty());

  // 70% non-zeros: the first `planned` bytes go to the buffer, the rest to the spill, and the
  // decoded map is bitwise the original.
  auto dense = random_vector(1000, 54, 0.1f, 1.0f);
  for (std::size_t i = 0; i < 1000; i += 10) dense[i] = dense[i + 1] = dense[i + 2] = 0.0f;
  const auto whole = sparse_bytes(1000, 700);
  REQUIRE(count_nonzeros(1000, dense.data()) == 700);
  CHECK(sparse_encode_spilling(1000, dense.data(), device.data(), planned, spill) == whole);
  CHECK(static_cast<std::int64_t>(spill.size()) == whole - planned);
  std::vector<float> decoded(1000, -1.0f);
  sparse_decode_spilled(1000, device.data(), planned, spill, decoded.data());
  CHECK(bitwise_equal(dense, decoded));
  // Without the spill the buffer alone does not hold the map.
  CHECK(sparse_encode(1000, dense.data(), device.data(), planned) == -1);
}

TEST_CASE("narrow floats: fp16 is IEEE half, rounding error is bounded", "[host_backend][gist]") {
  CHECK(narrow_encode_value(kFp16, 1.0f) == 0x3C00u);
  CHECK(narrow_encode_value(kFp16, -2.0f) == 0xC000u);
  CHECK(narrow_encode_value(kFp16, 65504.0f) == 0x7BFFu);
  CHECK(narrow_encode_value(kFp16, 1e6f) == 0x7BFFu);  // saturates
  CHECK(narrow_encode_value(kFp16, std::numeric_limits<float>::infinity()) == 0x7C00u);
  CHECK(narrow_decode_value(kFp16, 0x0001u) == Approx(5.960464477539063e-8));  // smallest subnormal
  CHECK(narrow_encode_value(kFp16, 1.0f + 1.0f / 2048) == 0x3C00u);            // tie to even
  CHECK(std::isnan(narrow_decode_value(kFp8, narrow_encode_value(kFp8, std::nanf("")))));
  for (NarrowFloat f : {kFp16, kFp10, kFp8}) {
    const auto x = random_vector(513, 54, -4.0f, 4.0f);
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(narrow_bytes(f, 513)));
    narrow_encode(f, 513, x.data(), packed.data());
    std::vector<float> y(513);
    narrow_decode(f, 513, packed.data(), y.data());
    const double min_normal = std::ldexp(1.0, 2 - (1 << (f.exponent_bits - 1)));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
      CHECK(err <= std::max(std::fabs(x[i]) * narrow_relative_error(f),
                            min_normal * narrow_relative_error(f)) *
                       1.0000001);
    }
  }
  CHECK(narrow_bytes(kFp10, 4) == 5);
  CHECK(narrow_bytes(kFp8, 4) == 4);
}
