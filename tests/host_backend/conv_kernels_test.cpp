#include <catch2/catch.hpp>

#include "host_backend/conv_kernels.hpp"
#include "tests/host_backend/gradient_check.hpp"

using namespace memplan::host_backend;
using memplan::test::max_gradient_error;
using memplan::test::random_vector;

namespace {

// Direct convolution in double, the reference the im2col + GEMM path must agree with.
std::vector<double> naive_conv(const ConvShape& s, const std::vector<float>& x,
                               const std::vector<float>& w) {
  const auto cg = s.in_channels / s.groups, kg = s.out_channels / s.groups;
  std::vector<double> y(static_cast<std::size_t>(s.output_elements()), 0.0);
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t k = 0; k < s.out_channels; ++k)
      for (std::int64_t z = 0; z < s.out_d(); ++z)
        for (std::int64_t i = 0; i < s.out_h(); ++i)
          for (std::int64_t j = 0; j < s.out_w(); ++j) {
            double sum = 0.0;
            const std::int64_t g = k / kg;
            for (std::int64_t c = 0; c < cg; ++c)
              for (std::int64_t t = 0; t < s.kernel_d; ++t)
                for (std::int64_t r = 0; r < s.kernel_h; ++r)
                  for (std::int64_t q = 0; q < s.kernel_w; ++q) {
                    const auto iz = z * s.stride_d - s.pad_d + t, iy = i * s.stride_h - s.pad_h + r,
                               ix = j * s.stride_w - s.pad_w + q;
                    if (iz < 0 || iz >= s.in_d || iy < 0 || iy >= s.in_h || ix < 0 || ix >= s.in_w)
                      continue;
                    const auto xi =
                        (((n * s.in_channels + g * cg + c) * s.in_d + iz) * s.in_h + iy) * s.in_w +
                        ix;
                    const auto wi =
                        (((k * cg + c) * s.kernel_d + t) * s.kernel_h + r) * s.kernel_w + q;
                    sum += static_cast<double>(x[static_cast<std::size_t>(xi)]) *
                           w[static_cast<std::size_t>(wi)];
                  }
            y[static_cast<std::size_t>(
                (((n * s.out_channels + k) * s.out_d() + z) * s.out_h() + i) * s.out_w() + j)] =
                sum;
          }
  return y;
}

std::vector<ConvShape> shapes() {
  ConvShape a;  // 2D, padded, strided
  a.batch = 2, a.in_channels = 3, a.out_channels = 4, a.in_h = 7, a.in_w = 6, a.kernel_h = 3,
  a.kernel_w = 3, a.stride_h = 2, a.stride_w = 1, a.pad_h = 1, a.pad_w = 1;
  ConvShape b;  // grouped 1x1 (ResNeXt, MobileNet style)
  b.batch = 1, b.in_channels = 4, b.out_channels = 6, b.groups = 2, b.in_h = 5, b.in_w = 5;
  ConvShape c;  // 3D (video)
  c.batch = 1, c.in_channels = 2, c.out_channels = 3, c.in_d = 4, c.in_h = 5, c.in_w = 5,
  c.kernel_d = 3, c.kernel_h = 3, c.kernel_w = 3, c.pad_d = 1, c.pad_h = 1, c.pad_w = 1,
  c.stride_d = 2;
  return {a, b, c};
}

}  // namespace

TEST_CASE("conv forward agrees with direct convolution (2D, grouped, 3D)", "[host_backend][conv]") {
  for (const ConvShape& s : shapes()) {
    const auto x = random_vector(static_cast<std::size_t>(s.input_elements()), 1);
    const auto w = random_vector(static_cast<std::size_t>(s.filter_elements()), 2);
    std::vector<float> y(static_cast<std::size_t>(s.output_elements()));
    std::vector<float> ws(static_cast<std::size_t>(s.workspace_elements()));
    conv_forward(s, x.data(), w.data(), nullptr, y.data(), ws.data());
    const auto ref = naive_conv(s, x, w);
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(ref[i]).margin(1e-5));
  }
}

TEST_CASE("conv backward matches finite differences", "[host_backend][conv]") {
  for (const ConvShape& s : shapes()) {
    const auto x = random_vector(static_cast<std::size_t>(s.input_elements()), 3);
    const auto w = random_vector(static_cast<std::size_t>(s.filter_elements()), 4);
    const auto r = random_vector(static_cast<std::size_t>(s.output_elements()), 5);
    std::vector<float> ws(static_cast<std::size_t>(s.workspace_elements()));
    std::vector<float> dx(x.size()), dw(w.size()), db(static_cast<std::size_t>(s.out_channels));
    conv_backward_data(s, r.data(), w.data(), dx.data(), ws.data());
    conv_backward_filter(s, x.data(), r.data(), dw.data(), db.data(), ws.data());
    auto forward_x = [&](const std::vector<float>& in) {
      std::vector<float> y(static_cast<std::size_t>(s.output_elements()));
      conv_forward(s, in.data(), w.data(), nullptr, y.data(), ws.data());
      return y;
    };
    auto forward_w = [&](const std::vector<float>& in) {
      std::vector<float> y(static_cast<std::size_t>(s.output_elements()));
      conv_forward(s, x.data(), in.data(), nullptr, y.data(), ws.data());
      return y;
    };
    CHECK(max_gradient_error(x, r, forward_x, dx) < 1e-2);
    CHECK(max_gradient_error(w, r, forward_w, dw) < 1e-2);
    double sum0 = 0.0;  // db[0] is the sum of dy over channel 0
    const auto spatial = s.out_d() * s.out_h() * s.out_w();
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t i = 0; i < spatial; ++i)
        sum0 += r[static_cast<std::size_t>(n * s.out_channels * spatial + i)];
    CHECK(db[0] == Approx(sum0).margin(1e-4));
  }
}

TEST_CASE("conv shapes that cannot be computed are refused", "[host_backend][conv]") {
  ConvShape s;
  s.in_channels = 3, s.groups = 2;
  CHECK_THROWS_AS(s.check(), std::invalid_argument);
  ConvShape t;
  t.in_h = 2, t.in_w = 2, t.kernel_h = 3, t.kernel_w = 3;
  CHECK_THROWS_AS(t.check(), std::invalid_argument);
}
