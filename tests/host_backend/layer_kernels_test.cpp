#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "host_backend/layer_kernels.hpp"
#include "tests/host_backend/gradient_check.hpp"

using namespace memplan::host_backend;
using memplan::test::max_gradient_error;
using memplan::test::random_vector;

TEST_CASE("batch-norm normalises per channel and its backward matches finite differences",
          "[host_backend][bn]") {
  BatchNormShape s{3, 2, 5, 1e-5f};
  const auto n = static_cast<std::size_t>(s.batch * s.channels * s.spatial);
  const auto x = random_vector(n, 11, -2.0f, 3.0f);
  const std::vector<float> gamma{1.5f, 0.5f}, beta{0.1f, -0.2f};
  std::vector<float> y(n), mean(2), invstd(2);
  batch_norm_forward(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data());
  // Channel 0 of the output has mean beta[0] and standard deviation gamma[0].
  double sum = 0.0, sq = 0.0;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t i = 0; i < s.spatial; ++i) {
      const double v = y[static_cast<std::size_t>(b * s.channels * s.spatial + i)];
      sum += v;
      sq += v * v;
    }
  const double m = sum / 15.0;
  CHECK(m == Approx(0.1).margin(1e-5));
  CHECK(std::sqrt(sq / 15.0 - m * m) == Approx(1.5).epsilon(1e-3));

  const auto r = random_vector(n, 12);
  std::vector<float> dx(n), dgamma(2), dbeta(2);
  batch_norm_backward(s, x.data(), gamma.data(), mean.data(), invstd.data(), r.data(), dx.data(),
                      dgamma.data(), dbeta.data());
  auto forward = [&](const std::vector<float>& in) {
    std::vector<float> out(n), mu(2), is(2);
    batch_norm_forward(s, in.data(), gamma.data(), beta.data(), out.data(), mu.data(), is.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, forward, dx, 1e-3f) < 2e-2);
}

TEST_CASE("ReLU backward reads the output, in place works", "[host_backend][relu]") {
  std::vector<float> x{-1.0f, 0.0f, 2.0f, -0.5f, 3.0f};
  relu_forward(5, x.data(), x.data());
  CHECK(x == std::vector<float>{0.0f, 0.0f, 2.0f, 0.0f, 3.0f});
  const std::vector<float> dy{1, 2, 3, 4, 5};
  std::vector<float> dx(5);
  relu_backward(5, dy.data(), x.data(), dx.data());
  CHECK(dx == std::vector<float>{0, 0, 3, 0, 5});
}

TEST_CASE("max-pool keeps indices and routes gradients through them", "[host_backend][pool]") {
  PoolShape s;
  s.batch = 1, s.channels = 1, s.in_h = 4, s.in_w = 4;
  const std::vector<float> x{1, 2, 5, 3, 4, 0, 1, 1, 9, 8, 2, 2, 7, 6, 3, 4};
  std::vector<float> y(4);
  std::vector<std::int64_t> idx(4);
  max_pool_forward(s, x.data(), y.data(), idx.data());
  CHECK(y == std::vector<float>{4, 5, 9, 4});
  CHECK(idx == std::vector<std::int64_t>{4, 2, 8, 15});
  const std::vector<float> dy{1, 2, 3, 4};
  std::vector<float> dx(16);
  max_pool_backward(s, dy.data(), idx.data(), dx.data());
  CHECK(dx[4] == 1);
  CHECK(dx[2] == 2);
  CHECK(dx[8] == 3);
  CHECK(dx[15] == 4);
  CHECK(std::accumulate(dx.begin(), dx.end(), 0.0f) == 10);
}

TEST_CASE("average pool backward matches finite differences", "[host_backend][pool]") {
  PoolShape s;
  s.batch = 2, s.channels = 2, s.in_h = 5, s.in_w = 5, s.kernel_h = 3, s.kernel_w = 3,
  s.stride_h = 2, s.stride_w = 2, s.pad_h = 1, s.pad_w = 1;
  const auto x = random_vector(static_cast<std::size_t>(s.input_elements()), 21);
  const auto r = random_vector(static_cast<std::size_t>(s.output_elements()), 22);
  std::vector<float> dx(x.size());
  avg_pool_backward(s, r.data(), dx.data());
  auto forward = [&](const std::vector<float>& in) {
    std::vector<float> y(static_cast<std::size_t>(s.output_elements()));
    avg_pool_forward(s, in.data(), y.data());
    return y;
  };
  CHECK(max_gradient_error(x, r, forward, dx) < 1e-3);
}

TEST_CASE("linear forward and backward", "[host_backend][linear]") {
  const std::int64_t n = 3, in = 4, out = 2;
  const auto x = random_vector(12, 31), w = random_vector(8, 32), b = random_vector(2, 33),
             r = random_vector(6, 34);
  std::vector<float> dx(12), dw(8), db(2);
  linear_backward(n, in, out, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
  auto fx = [&](const std::vector<float>& v) {
    std::vector<float> y(6);
    linear_forward(n, in, out, v.data(), w.data(), b.data(), y.data());
    return y;
  };
  auto fw = [&](const std::vector<float>& v) {
    std::vector<float> y(6);
    linear_forward(n, in, out, x.data(), v.data(), b.data(), y.data());
    return y;
  };
  CHECK(max_gradient_error(x, r, fx, dx) < 1e-3);
  CHECK(max_gradient_error(w, r, fw, dw) < 1e-3);
  CHECK(db[0] == Approx(r[0] + r[2] + r[4]));
}

TEST_CASE("concat splits back exactly", "[host_backend][concat]") {
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6};  // batch 2: a has 2 channels, b 1, spatial 1
  const std::int64_t channels[] = {2, 1};
  const float* parts[] = {a.data(), b.data()};
  std::vector<float> y(6);
  concat_forward(2, 1, 2, channels, parts, y.data());
  CHECK(y == std::vector<float>{1, 2, 5, 3, 4, 6});
  std::vector<float> da(4), dbv(2);
  float* dparts[] = {da.data(), dbv.data()};
  concat_backward(2, 1, 2, channels, y.data(), dparts);
  CHECK(da == a);
  CHECK(dbv == b);
}

TEST_CASE("dropout is seeded: the same seed gives the same mask, another seed another",
          "[host_backend][dropout]") {
  const auto x = random_vector(1000, 41);
  std::vector<float> y1(1000), y2(1000), y3(1000);
  std::vector<std::uint8_t> m1(1000), m2(1000), m3(1000);
  dropout_forward(1000, 0.3f, 7, x.data(), y1.data(), m1.data());
  dropout_forward(1000, 0.3f, 7, x.data(), y2.data(), m2.data());
  dropout_forward(1000, 0.3f, 8, x.data(), y3.data(), m3.data());
  CHECK(m1 == m2);
  CHECK(y1 == y2);
  CHECK(m1 != m3);
  const auto kept = std::accumulate(m1.begin(), m1.end(), 0);
  CHECK(kept > 620);
  CHECK(kept < 780);
  std::vector<float> dx(1000);
  dropout_backward(1000, 0.3f, x.data(), m1.data(), dx.data());
  CHECK(dx == y1);
}

TEST_CASE("softmax cross-entropy: loss, probabilities and gradient", "[host_backend][loss]") {
  const std::vector<float> logits{0.0f, 0.0f, 0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<std::int64_t> labels{1, 2};
  std::vector<float> probs(6), d(6);
  const float loss =
      softmax_cross_entropy_forward(2, 3, logits.data(), labels.data(), probs.data());
  const double l1 = std::log(3.0),
               l2 = -(3.0 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  CHECK(loss == Approx((l1 + l2) / 2));
  CHECK(probs[0] == Approx(1.0 / 3));
  softmax_cross_entropy_backward(2, 3, probs.data(), labels.data(), d.data());
  CHECK(d[1] == Approx((1.0 / 3 - 1) / 2));
  CHECK(d[0] + d[1] + d[2] == Approx(0).margin(1e-7));
  const std::vector<std::int64_t> bad{3, 0};
  CHECK_THROWS(softmax_cross_entropy_forward(2, 3, logits.data(), bad.data(), probs.data()));
}

TEST_CASE("SGD with momentum follows PyTorch's update rule", "[host_backend][sgd]") {
  std::vector<float> w{1.0f}, v{0.5f};
  const std::vector<float> g{2.0f};
  sgd_momentum_update(1, 0.1f, 0.9f, 0.0f, w.data(), g.data(), v.data());
  CHECK(v[0] == Approx(0.9f * 0.5f + 2.0f));
  CHECK(w[0] == Approx(1.0f - 0.1f * 2.45f));
}

TEST_CASE("adaptive average pool: PyTorch's windows, backward matches finite differences",
          "[host_backend][pool]") {
  // 5 -> 3 along H gives windows [0,2) [1,4) [3,5): overlapping, of unequal sizes; 3D too.
  for (const auto& [in_d, out_d] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {4, 3}}) {
    AdaptivePoolShape s;
    s.planes = 3, s.in_d = in_d, s.in_h = 5, s.in_w = 4, s.out_d = out_d, s.out_h = 3, s.out_w = 1;
    const auto x = random_vector(static_cast<std::size_t>(s.input_elements()), 51);
    const auto r = random_vector(static_cast<std::size_t>(s.output_elements()), 52);
    std::vector<float> y(r.size()), dx(x.size());
    adaptive_avg_pool_forward(s, x.data(), y.data());
    if (in_d == 1) {
      // First output of plane 0: rows 0..1, all 4 columns.
      float sum = 0;
      for (int i = 0; i < 8; ++i) sum += x[static_cast<std::size_t>(i)];
      CHECK(y[0] == Approx(sum / 8));
    }
    adaptive_avg_pool_backward(s, r.data(), dx.data());
    auto forward = [&](const std::vector<float>& in) {
      std::vector<float> out(static_cast<std::size_t>(s.output_elements()));
      adaptive_avg_pool_forward(s, in.data(), out.data());
      return out;
    };
    CHECK(max_gradient_error(x, r, forward, dx) < 1e-3);
  }
  // Global pooling (what resnet's avgpool to 1x1 is) averages the whole plane.
  AdaptivePoolShape g;
  g.planes = 2, g.in_h = 3, g.in_w = 3;
  std::vector<float> x(18), y(2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  adaptive_avg_pool_forward(g, x.data(), y.data());
  CHECK(y[0] == Approx(4.0f));
  CHECK(y[1] == Approx(13.0f));
}

TEST_CASE("ReLU6 clamps and its backward matches finite differences", "[host_backend][relu]") {
  auto x = random_vector(64, 61, -3.0f, 9.0f);
  // Keep clear of the kinks at 0 and 6 so the central difference is exact there.
  for (auto& v : x) {
    if (std::fabs(v) < 0.05f || std::fabs(v - 6.0f) < 0.05f) v += 0.2f;
  }
  const auto r = random_vector(64, 62);
  std::vector<float> y(64), dx(64);
  relu6_forward(64, x.data(), y.data());
  CHECK(*std::max_element(y.begin(), y.end()) == 6.0f);
  CHECK(*std::min_element(y.begin(), y.end()) == 0.0f);
  relu6_backward(64, r.data(), y.data(), dx.data());
  auto forward = [](const std::vector<float>& in) {
    std::vector<float> out(in.size());
    relu6_forward(static_cast<std::int64_t>(in.size()), in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, forward, dx) < 1e-3);
}

TEST_CASE("dropout and concat backward match finite differences",
          "[host_backend][dropout][concat]") {
  const auto x = random_vector(200, 71);
  const auto r = random_vector(200, 72);
  std::vector<float> y(200), dx(200);
  std::vector<std::uint8_t> mask(200);
  dropout_forward(200, 0.5f, 3, x.data(), y.data(), mask.data());
  dropout_backward(200, 0.5f, r.data(), mask.data(), dx.data());
  auto drop = [](const std::vector<float>& in) {
    std::vector<float> out(in.size());
    std::vector<std::uint8_t> m(in.size());
    dropout_forward(static_cast<std::int64_t>(in.size()), 0.5f, 3, in.data(), out.data(), m.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, drop, dx) < 1e-3);

  // Two parts of 2 and 3 channels, batch 2, spatial 4: the gradient of part a.
  const std::int64_t channels[] = {2, 3};
  const auto a = random_vector(16, 73), b = random_vector(24, 74), rc = random_vector(40, 75);
  std::vector<float> da(16), db(24);
  float* dparts[] = {da.data(), db.data()};
  concat_backward(2, 4, 2, channels, rc.data(), dparts);
  auto cat_a = [&](const std::vector<float>& in) {
    std::vector<float> out(40);
    const float* parts[] = {in.data(), b.data()};
    concat_forward(2, 4, 2, channels, parts, out.data());
    return out;
  };
  CHECK(max_gradient_error(a, rc, cat_a, da) < 1e-3);
}

TEST_CASE("ceil_mode pooling adds PyTorch's last partial window", "[host_backend][pool]") {
  // One 1x4 row, kernel 1x3, stride 2: floor mode has one window, ceil mode a second one over
  // columns 2..3 whose average divides by 2 (the window clipped to the padded input).
  PoolShape s;
  s.in_h = 1, s.in_w = 4, s.kernel_h = 1, s.kernel_w = 3, s.stride_h = 1, s.stride_w = 2;
  CHECK(s.out_w() == 1);
  s.ceil_mode = true;
  REQUIRE(s.out_w() == 2);
  const std::vector<float> x{1, 2, 3, 10};
  std::vector<float> y(2);
  avg_pool_forward(s, x.data(), y.data());
  CHECK(y[0] == Approx(2.0f));
  CHECK(y[1] == Approx(6.5f));
  std::vector<std::int64_t> idx(2);
  max_pool_forward(s, x.data(), y.data(), idx.data());
  CHECK(y == std::vector<float>{3, 10});
  CHECK(idx == std::vector<std::int64_t>{2, 3});

  // Gradients with ceil_mode and padding match finite differences.
  PoolShape t;
  t.batch = 1, t.channels = 2, t.in_h = 6, t.in_w = 5, t.kernel_h = 3, t.kernel_w = 3,
  t.stride_h = 2, t.stride_w = 2, t.pad_h = 1, t.pad_w = 0, t.ceil_mode = true;
  const auto xs = random_vector(static_cast<std::size_t>(t.input_elements()), 81);
  const auto r = random_vector(static_cast<std::size_t>(t.output_elements()), 82);
  std::vector<float> dx(xs.size());
  avg_pool_backward(t, r.data(), dx.data());
  auto forward = [&](const std::vector<float>& in) {
    std::vector<float> out(static_cast<std::size_t>(t.output_elements()));
    avg_pool_forward(t, in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(xs, r, forward, dx) < 1e-3);
}

TEST_CASE("3D pooling: max routes through indices, average matches finite differences",
          "[host_backend][pool]") {
  PoolShape s;
  s.batch = 1, s.channels = 2, s.in_d = 4, s.in_h = 5, s.in_w = 5, s.kernel_d = 3, s.kernel_h = 3,
  s.kernel_w = 3, s.stride_d = 2, s.stride_h = 2, s.stride_w = 2, s.pad_d = 1, s.pad_h = 1,
  s.pad_w = 1;
  REQUIRE(s.out_d() == 2);
  const auto x = random_vector(static_cast<std::size_t>(s.input_elements()), 91);
  const auto r = random_vector(static_cast<std::size_t>(s.output_elements()), 92);
  std::vector<float> dx(x.size());
  avg_pool_backward(s, r.data(), dx.data());
  auto avg = [&](const std::vector<float>& in) {
    std::vector<float> out(static_cast<std::size_t>(s.output_elements()));
    avg_pool_forward(s, in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, avg, dx) < 1e-3);

  std::vector<float> y(r.size());
  std::vector<std::int64_t> idx(r.size());
  max_pool_forward(s, x.data(), y.data(), idx.data());
  for (std::size_t o = 0; o < y.size(); ++o) {
    const std::size_t plane = o / static_cast<std::size_t>(s.out_d() * s.out_h() * s.out_w());
    CHECK(y[o] == x[plane * 100 + static_cast<std::size_t>(idx[o])]);
  }
  max_pool_backward(s, r.data(), idx.data(), dx.data());
  auto mx = [&](const std::vector<float>& in) {
    std::vector<float> out(static_cast<std::size_t>(s.output_elements()));
    std::vector<std::int64_t> i(out.size());
    max_pool_forward(s, in.data(), out.data(), i.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, mx, dx, 1e-3f) < 1e-2);
}
