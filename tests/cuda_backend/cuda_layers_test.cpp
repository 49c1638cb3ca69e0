// Each layer the CUDA executor runs, forward and backward, against the host backend's kernels on
// the same random data: cuDNN (conv2d, conv3d, batch-norm, average pooling), cuBLAS (linear) and
// the backend's own kernels (max and adaptive pooling, relu6, dropout, concat, softmax
// cross-entropy, the transformer's layers) give the host's values within the backend's
// tolerance, or its bits where the arithmetic is the same. [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "cuda_backend/cuda_op_executor.hpp"
#include "host_backend/conv_kernels.hpp"
#include "host_backend/layer_kernels.hpp"
#include "host_backend/transformer_kernels.hpp"
#include "tests/cuda_backend/cuda_test_support.hpp"

namespace mp = memplan;
namespace hb = memplan::host_backend;

using memplan::test::skip_without_device;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// A one-op workload whose tensors live in device memory the test owns.
class LayerCase {
 public:
  ~LayerCase() {
    for (void* p : device_) cudaFree(p);
  }
  mp::sim::TensorId tensor(std::vector<std::int64_t> shape, const std::string& dtype = "float32") {
    mp::sim::Tensor t;
    t.id = static_cast<mp::sim::TensorId>(w_.tensors.size());
    t.name = "t" + std::to_string(mp::sim::value(t.id));
    t.dtype = dtype;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    t.bytes = n * (dtype == "int64" ? 8 : dtype == "bool" ? 1 : 4);
    t.shape = std::move(shape);
    w_.tensors.push_back(t);
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, static_cast<std::size_t>(t.bytes)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, static_cast<std::size_t>(t.bytes)) == cudaSuccess);
    device_.push_back(p);
    return t.id;
  }
  template <class T>
  void upload(mp::sim::TensorId t, const std::vector<T>& values) {
    REQUIRE(values.size() * sizeof(T) == static_cast<std::size_t>(w_.tensor(t).bytes));
    REQUIRE(cudaMemcpy(device_[static_cast<std::size_t>(t)], values.data(),
                       values.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> download(mp::sim::TensorId t) {
    std::vector<float> out(static_cast<std::size_t>(w_.tensor(t).bytes) / 4);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(out.data(), device_[static_cast<std::size_t>(t)], out.size() * 4,
                       cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
  /// A backward op of `layer` that differentiates op `forward`.
  void run_backward_of(mp::sim::OpId forward, const std::string& layer,
                       std::vector<mp::sim::TensorId> in, std::vector<mp::sim::TensorId> out) {
    differentiates_ = forward;
    run(layer, mp::sim::Phase::kBackward, std::move(in), std::move(out));
  }
  /// Runs an op of `layer` and `phase` reading `in`, writing `out`, with a workspace of
  /// `workspace_bytes` (none when 0).
  void run(const std::string& layer, mp::sim::Phase phase, std::vector<mp::sim::TensorId> in,
           std::vector<mp::sim::TensorId> out, mp::sim::Attributes attributes = {},
           mp::sim::Bytes workspace_bytes = 0) {
    mp::sim::Op op;
    op.differentiates = std::exchange(differentiates_, mp::sim::kNoOp);
    op.id = static_cast<mp::sim::OpId>(w_.ops.size());
    op.name = layer + "_" + std::to_string(mp::sim::value(op.id));
    op.layer = mp::sim::LayerType::named(layer);
    op.phase = phase;
    op.inputs = std::move(in);
    op.outputs = std::move(out);
    op.attributes = std::move(attributes);
    w_.ops.push_back(op);
    std::vector<void*> operands;
    for (auto t : op.inputs) operands.push_back(device_[static_cast<std::size_t>(t)]);
    for (auto t : op.outputs) operands.push_back(device_[static_cast<std::size_t>(t)]);
    void* workspace = nullptr;
    if (workspace_bytes > 0) {
      REQUIRE(cudaMalloc(&workspace, static_cast<std::size_t>(workspace_bytes)) == cudaSuccess);
      device_.push_back(workspace);  // freed with the case (not a tensor: past the tensors)
      operands.push_back(workspace);
    }
    mp::cuda_backend::CudaOpExecutor executor(w_, nullptr);
    executor.run(w_.ops.back(), operands, workspace_bytes);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }

 private:
  mp::sim::Workload w_;
  std::vector<void*> device_;
  mp::sim::OpId differentiates_ = mp::sim::kNoOp;
};

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, diff);
    if (!(diff <= mp::cuda_backend::kAbsoluteTolerance +
                      mp::cuda_backend::kRelativeTolerance * std::fabs(want[i]))) {
      ++bad;
    }
  }
  CAPTURE(worst);
  CHECK(bad == 0);
}

/// -inf where the host has -inf (attention's causal mask), within the tolerance elsewhere.
void check_close_masked(std::vector<float> got, std::vector<float> want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isinf(want[i])) continue;
    CHECK(got[i] == want[i]);
    got[i] = want[i] = 0.0f;
  }
  check_close(got, want);
}

using mp::sim::Phase;

}  // namespace

namespace {

/// One convolution of shape `s` (3-d when s.in_d > 1 or s.kernel_d > 1) run by the CUDA executor
/// with `workspace` bytes, forward and backward, against the host's kernels on the same data.
void check_conv_against_host(const hb::ConvShape& s, mp::sim::Bytes workspace) {
  const bool three_d = s.in_d > 1 || s.kernel_d > 1;
  std::vector<std::int64_t> xs{s.batch, s.in_channels, s.in_h, s.in_w};
  std::vector<std::int64_t> ws{s.out_channels, s.in_channels / s.groups, s.kernel_h, s.kernel_w};
  std::vector<std::int64_t> ys{s.batch, s.out_channels, s.out_h(), s.out_w()};
  auto d = [](std::int64_t v) { return static_cast<double>(v); };
  mp::sim::Attributes attributes{{"kernel", {d(s.kernel_h), d(s.kernel_w)}},
                                 {"stride", {d(s.stride_h), d(s.stride_w)}},
                                 {"padding", {d(s.pad_h), d(s.pad_w)}}};
  if (three_d) {
    xs.insert(xs.begin() + 2, s.in_d);
    ws.insert(ws.begin() + 2, s.kernel_d);
    ys.insert(ys.begin() + 2, s.out_d());
    attributes = {{"kernel", {d(s.kernel_d), d(s.kernel_h), d(s.kernel_w)}},
                  {"stride", {d(s.stride_d), d(s.stride_h), d(s.stride_w)}},
                  {"padding", {d(s.pad_d), d(s.pad_h), d(s.pad_w)}}};
  }
  attributes["groups"] = {d(s.groups)};
  const auto x = random_floats(static_cast<std::size_t>(s.input_elements()), 1);
  const auto w = random_floats(static_cast<std::size_t>(s.filter_elements()), 2);
  const auto b = random_floats(static_cast<std::size_t>(s.out_channels), 3);
  const auto dy = random_floats(static_cast<std::size_t>(s.output_elements()), 4);
  std::vector<float> scratch(static_cast<std::size_t>(s.workspace_elements()));
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  hb::conv_forward(s, x.data(), w.data(), b.data(), y.data(), scratch.data());
  hb::conv_backward_data(s, dy.data(), w.data(), dx.data(), scratch.data());
  hb::conv_backward_filter(s, x.data(), dy.data(), dw.data(), db.data(), scratch.data());

  LayerCase c;
  const auto tx = c.tensor(xs), tw = c.tensor(ws), tb = c.tensor({s.out_channels});
  const auto ty = c.tensor(ys), tdy = c.tensor(ys), tdx = c.tensor(xs), tdw = c.tensor(ws),
             tdb = c.tensor({s.out_channels});
  c.upload(tx, x);
  c.upload(tw, w);
  c.upload(tb, b);
  c.upload(tdy, dy);
  const std::string layer = three_d ? "conv3d" : "conv2d";
  c.run(layer, Phase::kForward, {tx, tw, tb}, {ty}, attributes, workspace);
  {
    INFO("y");
    check_close(c.download(ty), y);
  }
  c.run(layer, Phase::kBackward, {tdy, tx, tw}, {tdx, tdw, tdb}, attributes, workspace);
  {
    INFO("dx");
    check_close(c.download(tdx), dx);
  }
  {
    INFO("dw");
    check_close(c.download(tdw), dw);
  }
  {
    INFO("db");
    check_close(c.download(tdb), db);
  }
}

}  // namespace

TEST_CASE("cuDNN convolutions match the host's, 2-d and 3-d, forward and backward",
          "[cuda][layers]") {
  if (skip_without_device()) return;
  const bool three_d = GENERATE(false, true);
  const mp::sim::Bytes workspace = GENERATE(mp::sim::Bytes{0}, mp::sim::Bytes{1} << 20);
  // Grouped (ResNeXt) and depthwise (MobileNet) as well as dense: on an H100 the zoo's
  // mobilenet_v2 and resnext101-3d, the two with groups, were the ones 2.5-2.8% off the host.
  const std::int64_t groups = GENERATE(1, 2, 4);
  CAPTURE(three_d, workspace, groups);
  hb::ConvShape s;
  s.batch = 2;
  s.in_channels = 4;
  s.out_channels = 4;
  s.groups = groups;
  s.in_d = three_d ? 4 : 1;
  s.in_h = 6;
  s.in_w = 5;
  s.kernel_d = three_d ? 3 : 1;
  s.kernel_h = s.kernel_w = 3;
  s.pad_d = three_d ? 1 : 0;
  s.pad_h = s.pad_w = 1;
  s.stride_h = 2;
  check_conv_against_host(s, workspace);
}

TEST_CASE("cuDNN grouped convolutions match the host's at the zoo's shapes", "[cuda][layers]") {
  if (skip_without_device()) return;
  // Passed at 4 channels on an H200, while the zoo's mobilenet_v2 and resnext101-3d stayed
  // 2.5-2.8% off the host: the shapes those networks have (MobileNetV2's depthwise 3x3 at stride
  // 1 and 2, ResNeXt-3D's 32 groups), with room for cuDNN's fastest algorithms' workspace.
  const mp::sim::Bytes workspace = GENERATE(mp::sim::Bytes{0}, mp::sim::Bytes{256} << 20);
  const int which = GENERATE(0, 1, 2, 3);
  CAPTURE(workspace, which);
  hb::ConvShape s;
  s.batch = 4;
  s.kernel_h = s.kernel_w = 3;
  s.pad_h = s.pad_w = 1;
  if (which < 3) {  // depthwise: 32 channels at 16x16 (stride 1, 2), 96 at 8x8
    s.in_channels = s.out_channels = s.groups = which == 2 ? 96 : 32;
    s.in_h = s.in_w = which == 2 ? 8 : 16;
    s.stride_h = s.stride_w = which == 1 ? 2 : 1;
  } else {  // ResNeXt-3D: 128 channels in 32 groups, 4x8x8 clips, stride 1x2x2
    s.batch = 2;
    s.in_channels = s.out_channels = 128;
    s.groups = 32;
    s.in_d = 4;
    s.in_h = s.in_w = 8;
    s.kernel_d = 3;
    s.pad_d = 1;
    s.stride_h = s.stride_w = 2;
  }
  check_conv_against_host(s, workspace);
}

TEST_CASE("cuDNN batch-norm matches the host's", "[cuda][layers]") {
  if (skip_without_device()) return;
  hb::BatchNormShape s;
  s.batch = 3;
  s.channels = 4;
  s.spatial = 10;
  const auto n = static_cast<std::size_t>(s.batch * s.channels * s.spatial);
  const auto c_n = static_cast<std::size_t>(s.channels);
  const auto x = random_floats(n, 5);
  const auto gamma = random_floats(c_n, 6);
  const auto beta = random_floats(c_n, 7);
  const auto dy = random_floats(n, 8);
  std::vector<float> y(n), mean(c_n), invstd(c_n), dx(n), dgamma(c_n), dbeta(c_n);
  hb::batch_norm_forward(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                         invstd.data());
  hb::batch_norm_backward(s, x.data(), gamma.data(), mean.data(), invstd.data(), dy.data(),
                          dx.data(), dgamma.data(), dbeta.data());
  LayerCase c;
  const std::vector<std::int64_t> shape{s.batch, s.channels, 2, 5};
  const auto tx = c.tensor(shape), tg = c.tensor({s.channels}), tbeta = c.tensor({s.channels}),
             trun = c.tensor({2, s.channels});
  const auto ty = c.tensor(shape), tm = c.tensor({s.channels}), ti = c.tensor({s.channels});
  const auto tdy = c.tensor(shape), tdx = c.tensor(shape), tdg = c.tensor({s.channels}),
             tdb = c.tensor({s.channels});
  c.upload(tx, x);
  c.upload(tg, gamma);
  c.upload(tbeta, beta);
  c.upload(tdy, dy);
  c.run("batch_norm", Phase::kForward, {tx, tg, tbeta, trun}, {ty, tm, ti});
  check_close(c.download(ty), y);
  check_close(c.download(tm), mean);
  check_close(c.download(ti), invstd);
  c.run("batch_norm", Phase::kBackward, {tdy, tx, tg, tm, ti}, {tdx, tdg, tdb});
  check_close(c.download(tdx), dx);
  check_close(c.download(tdg), dgamma);
  check_close(c.download(tdb), dbeta);
}

namespace {

// The GPU's max pool (with indices) and average pool, forward and backward, against the host's
// kernels on the same random input: max bitwise (same gathers in the same order), average close.
// `dims` is "2d" or "3d"; `xs` and `ys` are the input and output shapes.
void check_pools_match_host(const hb::PoolShape& s, const std::vector<std::int64_t>& xs,
                            const std::vector<std::int64_t>& ys,
                            const mp::sim::Attributes& attributes, const std::string& dims,
                            unsigned seed) {
  const auto x = random_floats(static_cast<std::size_t>(s.input_elements()), seed);
  const auto dy = random_floats(static_cast<std::size_t>(s.output_elements()), seed + 1);
  std::vector<float> y(dy.size()), dx(x.size()), avg_y(dy.size()), avg_dx(x.size());
  std::vector<std::int64_t> indices(dy.size());
  hb::max_pool_forward(s, x.data(), y.data(), indices.data());
  hb::max_pool_backward(s, dy.data(), indices.data(), dx.data());
  hb::avg_pool_forward(s, x.data(), avg_y.data());
  hb::avg_pool_backward(s, dy.data(), avg_dx.data());

  LayerCase c;
  const auto tx = c.tensor(xs), ty = c.tensor(ys), ti = c.tensor(ys, "int64"), tdy = c.tensor(ys),
             tdx = c.tensor(xs), tay = c.tensor(ys), tadx = c.tensor(xs);
  c.upload(tx, x);
  c.upload(tdy, dy);
  c.run("max_pool" + dims, Phase::kForward, {tx}, {ty, ti}, attributes);
  CHECK(c.download(ty) == y);
  c.run("max_pool" + dims, Phase::kBackward, {tdy, tx, ti}, {tdx}, attributes);
  CHECK(c.download(tdx) == dx);  // same gathers in the same order: bitwise
  c.run("avg_pool" + dims, Phase::kForward, {tx}, {tay}, attributes);
  check_close(c.download(tay), avg_y);
  c.run("avg_pool" + dims, Phase::kBackward, {tdy, tx}, {tadx}, attributes);
  check_close(c.download(tadx), avg_dx);
}

}  // namespace

TEST_CASE("pooling on the GPU matches the host's: max with indices, average with padding",
          "[cuda][layers]") {
  if (skip_without_device()) return;
  hb::PoolShape s;
  s.batch = 2;
  s.channels = 3;
  s.in_h = 7;
  s.in_w = 6;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  check_pools_match_host(s, {s.batch, s.channels, s.in_h, s.in_w},
                         {s.batch, s.channels, s.out_h(), s.out_w()},
                         {{"kernel", {3, 3}}, {"stride", {2, 2}}, {"padding", {1, 1}}}, "2d", 9);
}

TEST_CASE("3-d pooling on the GPU matches the host's: max with indices, average with padding",
          "[cuda][layers]") {
  if (skip_without_device()) return;
  hb::PoolShape s;
  s.batch = 2;
  s.channels = 2;
  s.in_d = 5;
  s.in_h = 6;
  s.in_w = 7;
  s.kernel_d = 2;
  s.kernel_h = s.kernel_w = 3;
  s.stride_d = 1;
  s.stride_h = s.stride_w = 2;
  s.pad_d = 0;
  s.pad_h = s.pad_w = 1;
  check_pools_match_host(s, {s.batch, s.channels, s.in_d, s.in_h, s.in_w},
                         {s.batch, s.channels, s.out_d(), s.out_h(), s.out_w()},
                         {{"kernel", {2, 3, 3}}, {"stride", {1, 2, 2}}, {"padding", {0, 1, 1}}},
                         "3d", 11);
}

TEST_CASE("cuBLAS linear and the loss kernels match the host's", "[cuda][layers]") {
  if (skip_without_device()) return;
  const std::int64_t n = 5, in = 7, out = 3;
  const auto x = random_floats(static_cast<std::size_t>(n * in), 11);
  const auto w = random_floats(static_cast<std::size_t>(in * out), 12);
  const auto b = random_floats(static_cast<std::size_t>(out), 13);
  const auto dy = random_floats(static_cast<std::size_t>(n * out), 14);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  hb::linear_forward(n, in, out, x.data(), w.data(), b.data(), y.data());
  hb::linear_backward(n, in, out, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  const std::vector<std::int64_t> labels{0, 2, 1, 1, 0};
  std::vector<float> probs(y.size()), dlogits(y.size());
  const float loss =
      hb::softmax_cross_entropy_forward(n, out, y.data(), labels.data(), probs.data());
  hb::softmax_cross_entropy_backward(n, out, probs.data(), labels.data(), dlogits.data());

  LayerCase c;
  // Weights [out, in], PyTorch's layout (traces/FORMAT.md).
  const auto tx = c.tensor({n, in}), tw = c.tensor({out, in}), tb = c.tensor({out}),
             ty = c.tensor({n, out}), tdy = c.tensor({n, out}), tdx = c.tensor({n, in}),
             tdw = c.tensor({out, in}), tdb = c.tensor({out});
  const auto tl = c.tensor({n}, "int64"), tloss = c.tensor({1}), tp = c.tensor({n, out}),
             tdl = c.tensor({n, out});
  c.upload(tx, x);
  c.upload(tw, w);
  c.upload(tb, b);
  c.upload(tdy, dy);
  c.upload(tl, labels);
  c.run("linear", Phase::kForward, {tx, tw, tb}, {ty});
  check_close(c.download(ty), y);
  c.run("linear", Phase::kBackward, {tdy, tx, tw}, {tdx, tdw, tdb});
  check_close(c.download(tdx), dx);
  check_close(c.download(tdw), dw);
  check_close(c.download(tdb), db);
  c.upload(ty, y);  // the host's logits, so that the loss is compared alone
  c.run("softmax_cross_entropy", Phase::kForward, {ty, tl}, {tloss, tp});
  check_close(c.download(tloss), {loss});
  check_close(c.download(tp), probs);
  c.run("softmax_cross_entropy", Phase::kBackward, {tp, tl}, {tdl});
  check_close(c.download(tdl), dlogits);
}

TEST_CASE("the GPU's own layer kernels give the host's bits", "[cuda][layers]") {
  if (skip_without_device()) return;
  const std::int64_t batch = 2, channels = 3, h = 5, w = 7;
  const auto n = static_cast<std::size_t>(batch * channels * h * w);
  auto x = random_floats(n, 15);
  for (std::size_t i = 0; i < n; i += 5) x[i] *= 9.0f;  // some above 6 for relu6
  const auto dy = random_floats(n, 16);
  const std::vector<std::int64_t> shape{batch, channels, h, w};
  LayerCase c;
  const auto tx = c.tensor(shape), tdy = c.tensor(shape);
  c.upload(tx, x);
  c.upload(tdy, dy);

  SECTION("relu6") {
    std::vector<float> y(n), dx(n);
    hb::relu6_forward(static_cast<std::int64_t>(n), x.data(), y.data());
    hb::relu6_backward(static_cast<std::int64_t>(n), dy.data(), y.data(), dx.data());
    const auto ty = c.tensor(shape), tdx = c.tensor(shape);
    c.run("relu6", Phase::kForward, {tx}, {ty});
    CHECK(c.download(ty) == y);
    c.run("relu6", Phase::kBackward, {tdy, ty}, {tdx});
    CHECK(c.download(tdx) == dx);
  }
  SECTION("dropout") {
    const float p = 0.3f;
    // host_backend::OpExecutor's dropout seed for the forward op (op 0 of the case).
    const std::uint64_t seed = 0x6d656d706c616eULL ^ (0ULL * 0x9e3779b97f4a7c15ULL);
    std::vector<float> y(n), dx(n);
    std::vector<std::uint8_t> mask(n);
    hb::dropout_forward(static_cast<std::int64_t>(n), p, seed, x.data(), y.data(), mask.data());
    hb::dropout_backward(static_cast<std::int64_t>(n), p, dy.data(), mask.data(), dx.data());
    const auto ty = c.tensor(shape), tmask = c.tensor(shape, "bool"), tdx = c.tensor(shape);
    c.run("dropout", Phase::kForward, {tx}, {ty, tmask}, {{"p", {p}}});
    CHECK(c.download(ty) == y);
    c.run("dropout", Phase::kBackward, {tdy, tmask}, {tdx}, {{"p", {p}}});
    CHECK(c.download(tdx) == dx);
  }
  SECTION("adaptive average pooling") {
    hb::AdaptivePoolShape s;
    s.planes = batch * channels;
    s.in_h = h;
    s.in_w = w;
    s.out_h = 2;
    s.out_w = 3;
    const std::vector<std::int64_t> ys{batch, channels, 2, 3};
    const auto pooled_dy = random_floats(static_cast<std::size_t>(s.output_elements()), 17);
    std::vector<float> y(pooled_dy.size()), dx(n);
    hb::adaptive_avg_pool_forward(s, x.data(), y.data());
    hb::adaptive_avg_pool_backward(s, pooled_dy.data(), dx.data());
    const auto ty = c.tensor(ys), tpdy = c.tensor(ys), tdx = c.tensor(shape);
    c.upload(tpdy, pooled_dy);
    c.run("adaptive_avg_pool", Phase::kForward, {tx}, {ty});
    CHECK(c.download(ty) == y);
    c.run("adaptive_avg_pool", Phase::kBackward, {tpdy, tx}, {tdx});
    CHECK(c.download(tdx) == dx);
  }
  SECTION("concat") {
    const std::vector<std::int64_t> other_shape{batch, 2, h, w};
    const auto other = random_floats(static_cast<std::size_t>(batch * 2 * h * w), 18);
    const std::int64_t parts_channels[] = {channels, 2};
    const float* parts[] = {x.data(), other.data()};
    std::vector<float> y(n + other.size());
    hb::concat_forward(batch, h * w, 2, parts_channels, parts, y.data());
    const std::vector<std::int64_t> ys{batch, channels + 2, h, w};
    const auto tother = c.tensor(other_shape), ty = c.tensor(ys), td0 = c.tensor(shape),
               td1 = c.tensor(other_shape);
    c.upload(tother, other);
    c.run("concat", Phase::kForward, {tx, tother}, {ty});
    CHECK(c.download(ty) == y);
    // Backward splits dy = y back into the parts (differentiates the forward op 0).
    c.run_backward_of(mp::sim::OpId{0}, "concat", {ty}, {td0, td1});
    CHECK(c.download(td0) == x);
    CHECK(c.download(td1) == other);
  }
  SECTION("adam") {
    // x as the weights, dy as the gradients, exp_avg random, exp_avg_sq its squares; step 3 with
    // weight decay: the kernel and runtime::adam_update round every operation alike.
    const mp::sim::Attributes attributes{
        {"lr", {0.002}}, {"betas", {0.8, 0.99}}, {"weight_decay", {0.01}}, {"step", {3}}};
    auto weights = x;
    auto m = random_floats(n, 19);
    auto v = random_floats(n, 20);
    for (float& e : v) e *= e;
    const auto tm = c.tensor(shape), tv = c.tensor(shape);
    c.upload(tm, m);
    c.upload(tv, v);
    c.run("adam", Phase::kUpdate, {tx, tdy, tm, tv}, {}, attributes);
    mp::sim::Op op;
    op.attributes = attributes;
    hb::adam_update(static_cast<std::int64_t>(n), hb::adam_step(op), weights.data(), dy.data(),
                    m.data(), v.data());
    CHECK(c.download(tx) == weights);
    CHECK(c.download(tm) == m);
    CHECK(c.download(tv) == v);
  }
}

TEST_CASE("the transformer's layers on the GPU match the host's", "[cuda][layers]") {
  if (skip_without_device()) return;
  const std::int64_t batch = 2, sequence = 5, hidden = 8, heads = 2, vocab = 11;
  const std::int64_t rows = batch * sequence;
  const auto n = static_cast<std::size_t>(rows * hidden);
  LayerCase c;

  SECTION("layer_norm") {
    const auto x = random_floats(n, 21), w = random_floats(static_cast<std::size_t>(hidden), 22),
               b = random_floats(static_cast<std::size_t>(hidden), 23), dy = random_floats(n, 24);
    std::vector<float> y(n), mean(static_cast<std::size_t>(rows)), rstd(mean.size()), dx(n),
        dw(w.size()), db(w.size());
    hb::layer_norm_forward(rows, hidden, 1e-5f, x.data(), w.data(), b.data(), y.data(), mean.data(),
                           rstd.data());
    hb::layer_norm_backward(rows, hidden, x.data(), w.data(), mean.data(), rstd.data(), dy.data(),
                            dx.data(), dw.data(), db.data());
    const auto tx = c.tensor({batch, sequence, hidden}), tw = c.tensor({hidden}),
               tb = c.tensor({hidden}), ty = c.tensor({batch, sequence, hidden}),
               tm = c.tensor({batch, sequence}), tr = c.tensor({batch, sequence}),
               tdy = c.tensor({batch, sequence, hidden}), tdx = c.tensor({batch, sequence, hidden}),
               tdw = c.tensor({hidden}), tdb = c.tensor({hidden});
    c.upload(tx, x);
    c.upload(tw, w);
    c.upload(tb, b);
    c.upload(tdy, dy);
    c.run("layer_norm", Phase::kForward, {tx, tw, tb}, {ty, tm, tr}, {{"epsilon", {1e-5}}});
    check_close(c.download(ty), y);
    check_close(c.download(tm), mean);
    check_close(c.download(tr), rstd);
    c.run("layer_norm", Phase::kBackward, {tdy, tx, tw, tm, tr}, {tdx, tdw, tdb});
    check_close(c.download(tdx), dx);
    check_close(c.download(tdw), dw);
    check_close(c.download(tdb), db);
  }
  SECTION("gelu") {
    const auto x = random_floats(n, 25), dy = random_floats(n, 26);
    std::vector<float> y(n), dx(n);
    hb::gelu_forward(static_cast<std::int64_t>(n), x.data(), y.data());
    hb::gelu_backward(static_cast<std::int64_t>(n), dy.data(), x.data(), dx.data());
    const auto tx = c.tensor({rows, hidden}), ty = c.tensor({rows, hidden}),
               tdy = c.tensor({rows, hidden}), tdx = c.tensor({rows, hidden});
    c.upload(tx, x);
    c.upload(tdy, dy);
    c.run("gelu", Phase::kForward, {tx}, {ty});
    check_close(c.download(ty), y);
    c.run("gelu", Phase::kBackward, {tdy, tx}, {tdx});
    check_close(c.download(tdx), dx);
  }
  SECTION("embedding") {
    std::vector<std::int64_t> indices(static_cast<std::size_t>(rows));
    for (std::size_t i = 0; i < indices.size(); ++i) {
      indices[i] = static_cast<std::int64_t>((i * 7) % 4);  // repeated rows: sums in the backward
    }
    const auto table = random_floats(static_cast<std::size_t>(vocab * hidden), 27);
    const auto dy = random_floats(n, 28);
    std::vector<float> y(n), dtable(table.size());
    hb::embedding_forward(rows, hidden, vocab, indices.data(), table.data(), y.data());
    hb::embedding_backward(rows, hidden, vocab, indices.data(), dy.data(), dtable.data());
    const auto ti = c.tensor({batch, sequence}, "int64"), tt = c.tensor({vocab, hidden}),
               ty = c.tensor({batch, sequence, hidden}), tdy = c.tensor({batch, sequence, hidden}),
               tdt = c.tensor({vocab, hidden});
    c.upload(ti, indices);
    c.upload(tt, table);
    c.upload(tdy, dy);
    c.run("embedding", Phase::kForward, {ti, tt}, {ty});
    CHECK(c.download(ty) == y);  // a copy
    c.run("embedding", Phase::kBackward, {tdy, ti}, {tdt});
    CHECK(c.download(tdt) == dtable);  // the same sums in the same order
  }
  SECTION("attention and its softmax") {
    const hb::AttentionShape a{batch, sequence, hidden, heads};
    const auto qkv = random_floats(n * 3, 29);
    const auto scores_size = static_cast<std::size_t>(batch * heads * sequence * sequence);
    const auto dscores = random_floats(scores_size, 30), dy = random_floats(n, 31),
               dprobs_in = random_floats(scores_size, 32);
    std::vector<float> scores(scores_size), probs(scores_size), dsoft(scores_size), y(n),
        dqkv_scores(n * 3), dprobs(scores_size), dqkv_context(n * 3);
    hb::attention_scores_forward(a, qkv.data(), scores.data());
    hb::softmax_forward(batch * heads * sequence, sequence, scores.data(), probs.data());
    hb::softmax_backward(batch * heads * sequence, sequence, dprobs_in.data(), probs.data(),
                         dsoft.data());
    hb::attention_context_forward(a, probs.data(), qkv.data(), y.data());
    hb::attention_scores_backward(a, dscores.data(), qkv.data(), dqkv_scores.data());
    hb::attention_context_backward(a, dy.data(), probs.data(), qkv.data(), dprobs.data(),
                                   dqkv_context.data());
    const std::vector<std::int64_t> qkv_shape{batch, sequence, 3 * hidden};
    const std::vector<std::int64_t> score_shape{batch, heads, sequence, sequence};
    const auto tq = c.tensor(qkv_shape), ts = c.tensor(score_shape), tp = c.tensor(score_shape),
               tdpi = c.tensor(score_shape), tdsoft = c.tensor(score_shape),
               ty = c.tensor({batch, sequence, hidden}), tds = c.tensor(score_shape),
               tdq1 = c.tensor(qkv_shape), tdy = c.tensor({batch, sequence, hidden}),
               tdp = c.tensor(score_shape), tdq2 = c.tensor(qkv_shape);
    c.upload(tq, qkv);
    c.upload(tds, dscores);
    c.upload(tdy, dy);
    c.upload(tdpi, dprobs_in);
    c.run("attention_scores", Phase::kForward, {tq}, {ts});
    check_close_masked(c.download(ts), scores);
    c.run("softmax", Phase::kForward, {ts}, {tp});  // cuDNN's, over rows with -inf entries
    check_close(c.download(tp), probs);
    c.upload(tp, probs);  // the host's probabilities from here on
    c.run("softmax", Phase::kBackward, {tdpi, tp}, {tdsoft});
    check_close(c.download(tdsoft), dsoft);
    c.run("attention_context", Phase::kForward, {tp, tq}, {ty});
    check_close(c.download(ty), y);
    c.run("attention_scores", Phase::kBackward, {tds, tq}, {tdq1});
    check_close(c.download(tdq1), dqkv_scores);
    c.run("attention_context", Phase::kBackward, {tdy, tp, tq}, {tdp, tdq2});
    check_close(c.download(tdp), dprobs);
    check_close(c.download(tdq2), dqkv_context);
  }
}
