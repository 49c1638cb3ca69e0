// The transformer's host kernels against finite differences (tests/host_backend/gradient_check.hpp)
// and a few exact values: layer-norm, GELU, softmax, embedding, and attention split into scores
// (causal, scaled) and context over a fused QKV buffer.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "host_backend/transformer_kernels.hpp"
#include "tests/host_backend/gradient_check.hpp"

using namespace memplan::host_backend;
using memplan::test::max_gradient_error;
using memplan::test::random_vector;

TEST_CASE("layer-norm normalises rows and its backward matches finite differences",
          "[host_backend][transformer]") {
  const std::int64_t rows = 3, h = 5;
  const auto x = random_vector(15, 101), w = random_vector(5, 102), b = random_vector(5, 103),
             r = random_vector(15, 104);
  std::vector<float> y(15), mean(3), rstd(3), dx(15), dw(5), db(5);
  layer_norm_forward(rows, h, 1e-5f, x.data(), w.data(), b.data(), y.data(), mean.data(),
                     rstd.data());
  layer_norm_backward(rows, h, x.data(), w.data(), mean.data(), rstd.data(), r.data(), dx.data(),
                      dw.data(), db.data());
  auto fx = [&](const std::vector<float>& in) {
    std::vector<float> out(15), m(3), s(3);
    layer_norm_forward(rows, h, 1e-5f, in.data(), w.data(), b.data(), out.data(), m.data(),
                       s.data());
    return out;
  };
  auto fw = [&](const std::vector<float>& in) {
    std::vector<float> out(15), m(3), s(3);
    layer_norm_forward(rows, h, 1e-5f, x.data(), in.data(), b.data(), out.data(), m.data(),
                       s.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, fx, dx, 1e-3f) < 1e-2);
  CHECK(max_gradient_error(w, r, fw, dw) < 1e-3);
  CHECK(db[0] == Approx(r[0] + r[5] + r[10]));
}

TEST_CASE("GELU and softmax backward match finite differences", "[host_backend][transformer]") {
  const auto x = random_vector(24, 111, -3.0f, 3.0f), r = random_vector(24, 112);
  std::vector<float> y(24), dx(24);
  gelu_forward(24, x.data(), y.data());
  CHECK(y[0] == Approx(0.5 * x[0] * (1.0 + std::erf(x[0] / std::sqrt(2.0)))));
  gelu_backward(24, r.data(), x.data(), dx.data());
  auto gelu = [](const std::vector<float>& in) {
    std::vector<float> out(in.size());
    gelu_forward(static_cast<std::int64_t>(in.size()), in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, gelu, dx, 1e-3f) < 1e-2);

  softmax_forward(4, 6, x.data(), y.data());
  double row = 0.0;
  for (int c = 0; c < 6; ++c) row += y[static_cast<std::size_t>(c)];
  CHECK(row == Approx(1.0));
  softmax_backward(4, 6, r.data(), y.data(), dx.data());
  auto softmax = [](const std::vector<float>& in) {
    std::vector<float> out(in.size());
    softmax_forward(4, 6, in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(x, r, softmax, dx, 1e-3f) < 1e-2);
}

TEST_CASE("embedding gathers rows, sums gradients per row, refuses indices outside",
          "[host_backend][transformer]") {
  const std::vector<float> table{0, 1, 10, 11, 20, 21};  // 3 rows of 2
  const std::vector<std::int64_t> idx{2, 0, 2};
  std::vector<float> y(6);
  embedding_forward(3, 2, 3, idx.data(), table.data(), y.data());
  CHECK(y == std::vector<float>{20, 21, 0, 1, 20, 21});
  const std::vector<float> dy{1, 2, 3, 4, 5, 6};
  std::vector<float> dtable(6);
  embedding_backward(3, 2, 3, idx.data(), dy.data(), dtable.data());
  CHECK(dtable == std::vector<float>{3, 4, 0, 0, 6, 8});
  const std::vector<std::int64_t> bad{3};
  CHECK_THROWS_AS(embedding_forward(1, 2, 3, bad.data(), table.data(), y.data()),
                  std::out_of_range);
}

TEST_CASE("attention scores (causal) and context backward match finite differences",
          "[host_backend][transformer]") {
  AttentionShape s;
  s.batch = 2, s.sequence = 3, s.hidden = 4, s.heads = 2;
  const std::size_t n_qkv = 2 * 3 * 12, n_scores = 2 * 2 * 3 * 3, n_y = 2 * 3 * 4;
  const auto qkv = random_vector(n_qkv, 121);
  const auto rs = random_vector(n_scores, 122);
  std::vector<float> scores(n_scores), dqkv(n_qkv);
  attention_scores_forward(s, qkv.data(), scores.data());
  CHECK(std::isinf(scores[1]));  // token 0 does not see token 1
  // q0·k0/√2 of head 0, batch 0.
  CHECK(scores[0] == Approx((qkv[0] * qkv[4] + qkv[1] * qkv[5]) / std::sqrt(2.0f)));
  attention_scores_backward(s, rs.data(), qkv.data(), dqkv.data());
  auto sc = [&](const std::vector<float>& in) {
    std::vector<float> out(n_scores);
    attention_scores_forward(s, in.data(), out.data());
    for (auto& v : out) v = std::isinf(v) ? 0.0f : v;  // masked: constant, no gradient
    return out;
  };
  CHECK(max_gradient_error(qkv, rs, sc, dqkv, 1e-3f) < 1e-2);

  const auto probs = random_vector(n_scores, 123, 0.0f, 1.0f);
  const auto ry = random_vector(n_y, 124);
  std::vector<float> dprobs(n_scores);
  attention_context_backward(s, ry.data(), probs.data(), qkv.data(), dprobs.data(), dqkv.data());
  auto ctx_p = [&](const std::vector<float>& in) {
    std::vector<float> out(n_y);
    attention_context_forward(s, in.data(), qkv.data(), out.data());
    return out;
  };
  auto ctx_v = [&](const std::vector<float>& in) {
    std::vector<float> out(n_y);
    attention_context_forward(s, probs.data(), in.data(), out.data());
    return out;
  };
  CHECK(max_gradient_error(probs, ry, ctx_p, dprobs, 1e-3f) < 1e-2);
  CHECK(max_gradient_error(qkv, ry, ctx_v, dqkv, 1e-3f) < 1e-2);
}
