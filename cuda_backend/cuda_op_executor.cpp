#include "cuda_backend/cuda_op_executor.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <initializer_list>
#include <string>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/kernels.cuh"
#include "runtime/host_ops.hpp"
#include "runtime/op_call.hpp"
#include "sim/plan.hpp"

namespace memplan::cuda_backend {

namespace {

using runtime::attr;
using runtime::elements;
using runtime::f32;
using runtime::fail;
using runtime::i64;

int as_int(const sim::Op& op, std::int64_t v) {
  if (v < 0 || v > INT_MAX) fail(op, "an extent does not fit cuDNN's and cuBLAS's int");
  return static_cast<int>(v);
}

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

// ---- RAII descriptors
// ------------------------------------------------------------------------------

class TensorDesc {
 public:
  TensorDesc() { MEMPLAN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  ~TensorDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyTensorDescriptor(d_)); }
  /// A contiguous float tensor of these extents (at least 4: trailing 1s are added).
  void set(const sim::Op& op, std::vector<std::int64_t> dims) {
    while (dims.size() < 4) dims.push_back(1);
    std::vector<int> d(dims.size());
    std::vector<int> s(dims.size());
    std::int64_t stride = 1;
    for (std::size_t i = dims.size(); i-- > 0;) {
      d[i] = as_int(op, dims[i]);
      s[i] = as_int(op, stride);
      stride *= dims[i];
    }
    MEMPLAN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d_, CUDNN_DATA_FLOAT, static_cast<int>(d.size()),
                                                   d.data(), s.data()));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc() { MEMPLAN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  ~FilterDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyFilterDescriptor(d_)); }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc() { MEMPLAN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  ~ConvDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyConvolutionDescriptor(d_)); }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// Descriptors of a convolution: x [N, C, (D,) H, W], w [K, C/g, (T,) R, S], y as the trace says
/// (checked against cuDNN's output extents), bias [1, K, 1, ...].
struct Conv {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;

  Conv(const sim::Op& op, const sim::Tensor& xt, const sim::Tensor& wt, const sim::Tensor& yt) {
    const std::size_t rank = xt.shape.size();
    const bool conv3d = op.layer == sim::Layer::kConv3d;
    if ((conv3d && rank != 5) || (!conv3d && rank != 4) || wt.shape.size() != rank ||
        yt.shape.size() != rank) {
      fail(op, conv3d ? "conv3d needs 5-d input, filter and output"
                      : "conv2d needs 4-d input, filter and output");
    }
    const std::size_t spatial = rank - 2;
    x.set(op, xt.shape);
    y.set(op, yt.shape);
    std::vector<std::int64_t> b(rank, 1);
    b[1] = wt.shape[0];
    bias.set(op, b);
    std::vector<int> wd;
    for (std::int64_t d : wt.shape) wd.push_back(as_int(op, d));
    MEMPLAN_CUDNN_CHECK(cudnnSetFilterNdDescriptor(w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   static_cast<int>(rank), wd.data()));
    std::vector<int> pad(spatial), stride(spatial), dilation(spatial, 1);
    for (std::size_t i = 0; i < spatial; ++i) {
      if (attr(op, "kernel", i, wt.shape[2 + i]) != wt.shape[2 + i]) {
        fail(op, "the 'kernel' attribute differs from the filter's extents");
      }
      pad[i] = as_int(op, attr(op, "padding", i, 0));
      stride[i] = as_int(op, attr(op, "stride", i, 1));
    }
    MEMPLAN_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv.get(), static_cast<int>(spatial),
                                                        pad.data(), stride.data(), dilation.data(),
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MEMPLAN_CUDNN_CHECK(
        cudnnSetConvolutionGroupCount(conv.get(), as_int(op, attr(op, "groups", 0, 1))));
    // IEEE fp32 arithmetic: no TF32 tensor-core math.
    MEMPLAN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), CUDNN_FMA_MATH));
    std::vector<int> out(rank);
    MEMPLAN_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv.get(), x.get(), w.get(),
                                                              static_cast<int>(rank), out.data()));
    for (std::size_t i = 0; i < rank; ++i) {
      if (out[i] != yt.shape[i]) fail(op, "the output's extents are not the convolution's");
    }
  }
};

/// The fastest deterministic algorithm of `found` (fastest first) whose workspace fits
/// `available` bytes; a non-deterministic one only when no deterministic one fits.
const FoundAlgorithm& pick(const sim::Op& op, const std::vector<FoundAlgorithm>& found,
                           sim::Bytes available, const char* pass) {
  const FoundAlgorithm* fallback = nullptr;
  for (const FoundAlgorithm& a : found) {
    if (static_cast<sim::Bytes>(a.workspace_bytes) > available) continue;
    if (a.deterministic) return a;
    if (fallback == nullptr) fallback = &a;
  }
  if (fallback != nullptr) return *fallback;
  fail(op, std::string("no cuDNN ") + pass + " algorithm fits the workspace of " +
               std::to_string(available) + " bytes");
}

template <class Perf>
std::vector<FoundAlgorithm> usable(const Perf* perf, int count) {
  std::vector<FoundAlgorithm> found;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    found.push_back({static_cast<int>(perf[i].algo), perf[i].memory, perf[i].time,
                     perf[i].determinism == CUDNN_DETERMINISTIC});
  }
  return found;  // cudnnFind sorts by time
}

/// Whether `found` has a deterministic algorithm: then only those are reported (and run).
bool any_deterministic(const std::vector<FoundAlgorithm>& found) {
  return std::any_of(found.begin(), found.end(),
                     [](const FoundAlgorithm& a) { return a.deterministic; });
}

const FoundAlgorithm* least_memory(const std::vector<FoundAlgorithm>& found) {
  const bool deterministic_only = any_deterministic(found);
  const FoundAlgorithm* best = nullptr;
  for (const FoundAlgorithm& a : found) {
    if (deterministic_only && !a.deterministic) continue;
    if (best == nullptr || a.workspace_bytes < best->workspace_bytes) best = &a;
  }
  return best;
}

}  // namespace

// ---- ConvAlgorithms
// ----------------------------------------------------------------------------------

namespace {
template <class Pick>
std::pair<sim::Bytes, double> combine(const ConvAlgorithms& c, Pick pick_one) {
  sim::Bytes ws = 0;
  double ms = 0;
  for (const auto* pass : {&c.forward, &c.backward_data, &c.backward_filter}) {
    if (pass->empty()) continue;
    const FoundAlgorithm& a = pick_one(*pass);
    ws = std::max(ws, static_cast<sim::Bytes>(a.workspace_bytes));
    ms += std::max(a.time_ms, 0.0f);  // heuristics' results carry no time
  }
  return {ws, ms};
}
const FoundAlgorithm& first(const std::vector<FoundAlgorithm>& v) {
  const bool deterministic_only = any_deterministic(v);
  for (const FoundAlgorithm& a : v) {
    if (a.deterministic || !deterministic_only) return a;
  }
  return v.front();
}
const FoundAlgorithm& smallest(const std::vector<FoundAlgorithm>& v) {
  return *least_memory(v);
}
}  // namespace

sim::Bytes ConvAlgorithms::fastest_workspace() const {
  return combine(*this, first).first;
}
double ConvAlgorithms::fastest_ms() const {
  return combine(*this, first).second;
}
sim::Bytes ConvAlgorithms::memory_optimal_workspace() const {
  return combine(*this, smallest).first;
}
double ConvAlgorithms::memory_optimal_ms() const {
  return combine(*this, smallest).second;
}

std::uint64_t algorithm_cache_key(const sim::Workload& workload) {
  sim::Workload w = workload;
  for (sim::Op& op : w.ops) op.workspace_bytes = 0;
  return sim::workload_fingerprint(w);
}

// ---- CudaOpExecutor
// ----------------------------------------------------------------------------------

CudaOpExecutor::CudaOpExecutor(const sim::Workload& workload, cudaStream_t stream,
                               std::shared_ptr<ConvAlgorithmCache> cache)
    : w_(workload),
      stream_(stream),
      cache_(cache != nullptr ? std::move(cache) : std::make_shared<ConvAlgorithmCache>()),
      conv_(&(*cache_)[algorithm_cache_key(workload)]) {
  MEMPLAN_CUDNN_CHECK(cudnnCreate(&cudnn_));
  MEMPLAN_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  MEMPLAN_CUBLAS_CHECK(cublasCreate(&cublas_));
  MEMPLAN_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  MEMPLAN_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
}

CudaOpExecutor::~CudaOpExecutor() {
  if (scratch_ != nullptr) MEMPLAN_CUDA_REPORT(cudaFree(scratch_));
  if (cublas_ != nullptr) MEMPLAN_CUBLAS_REPORT(cublasDestroy(cublas_));
  if (cudnn_ != nullptr) MEMPLAN_CUDNN_REPORT(cudnnDestroy(cudnn_));
}

void* CudaOpExecutor::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_ != nullptr) MEMPLAN_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    MEMPLAN_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void CudaOpExecutor::find_algorithms() {
  for (const sim::Op& op : w_.ops) {
    if (op.layer != sim::Layer::kConv2d && op.layer != sim::Layer::kConv3d) continue;
    if (op.phase == sim::Phase::kUpdate || conv_->contains(op.id)) continue;
    find_for(op);
  }
}

// cudnnFind times every algorithm, on buffers it allocates itself; when that fails (a GPU whose
// memory the arena nearly fills), cuDNN's heuristics (Get*_v7) rank the algorithms instead.
void CudaOpExecutor::find_for(const sim::Op& op) {
  ConvAlgorithms found;
  int count = 0;
  if (op.phase == sim::Phase::kForward) {
    if (op.inputs.size() < 2 || op.outputs.empty()) fail(op, "convolution reads x and w, writes y");
    const Conv c(op, w_.tensor(op.inputs[0]), w_.tensor(op.inputs[1]), w_.tensor(op.outputs[0]));
    std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
    const auto n = static_cast<int>(perf.size());
    if (cudnnFindConvolutionForwardAlgorithm(cudnn_, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                                             n, &count, perf.data()) != CUDNN_STATUS_SUCCESS) {
      MEMPLAN_CUDA_CLEAR_ERROR(cudaErrorMemoryAllocation);  // Find's own, handled here
      MEMPLAN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
          cudnn_, c.x.get(), c.w.get(), c.conv.get(), c.y.get(), n, &count, perf.data()));
    }
    found.forward = usable(perf.data(), count);
  } else {
    // [dy, x, w] -> [dx,] dw [, db]
    if (op.inputs.size() != 3) fail(op, "convolution backward reads dy, x and w");
    const Conv c(op, w_.tensor(op.inputs[1]), w_.tensor(op.inputs[2]), w_.tensor(op.inputs[0]));
    // Backward data only when the op writes dx (not for a first layer's convolution).
    if (runtime::OpCall{w_, op, {}, {}}.grad_outputs().dx) {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> data{};
      const auto n = static_cast<int>(data.size());
      if (cudnnFindConvolutionBackwardDataAlgorithm(cudnn_, c.w.get(), c.y.get(), c.conv.get(),
                                                    c.x.get(), n, &count,
                                                    data.data()) != CUDNN_STATUS_SUCCESS) {
        MEMPLAN_CUDA_CLEAR_ERROR(cudaErrorMemoryAllocation);  // Find's own, handled here
        MEMPLAN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            cudnn_, c.w.get(), c.y.get(), c.conv.get(), c.x.get(), n, &count, data.data()));
      }
      found.backward_data = usable(data.data(), count);
    }
    std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>
        filter{};
    const auto n = static_cast<int>(filter.size());
    if (cudnnFindConvolutionBackwardFilterAlgorithm(cudnn_, c.x.get(), c.y.get(), c.conv.get(),
                                                    c.w.get(), n, &count,
                                                    filter.data()) != CUDNN_STATUS_SUCCESS) {
      MEMPLAN_CUDA_CLEAR_ERROR(cudaErrorMemoryAllocation);  // Find's own, handled here
      MEMPLAN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          cudnn_, c.x.get(), c.y.get(), c.conv.get(), c.w.get(), n, &count, filter.data()));
    }
    found.backward_filter = usable(filter.data(), count);
  }
  (*conv_)[op.id] = std::move(found);
}

namespace {

void sum_into(cudaStream_t s, std::int64_t n, std::span<void* const> in, float* out) {
  if (in.size() == 1) {
    if (in[0] != out) {
      MEMPLAN_CUDA_CHECK(cudaMemcpyAsync(out, in[0], static_cast<std::size_t>(n) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  MEMPLAN_CUDA_CHECK(kernels::add(s, n, f32(in[0]), f32(in[1]), out));
  for (std::size_t i = 2; i < in.size(); ++i)
    MEMPLAN_CUDA_CHECK(kernels::add(s, n, out, f32(in[i]), out));
}

/// Max pooling's extents: x and y [N, C, H, W] (max_pool2d) or [N, C, D, H, W] (max_pool3d);
/// attributes as the host backend reads them (kernel 2, stride = kernel, padding 0 by default).
kernels::PoolExtents pool_extents(const sim::Op& op, const sim::Tensor& x, const sim::Tensor& y) {
  const std::size_t rank = op.layer.rule().spatial_dims == 3 ? 5 : 4;
  if (x.shape.size() != rank || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, op.layer.str() + " needs " + std::to_string(rank) + "-d tensors of the same N and C");
  }
  const std::size_t h = rank == 5 ? 1 : 0;  // attribute index of H
  kernels::PoolExtents e{};
  e.planes = x.shape[0] * x.shape[1];
  e.in_d = e.out_d = e.kernel_d = e.stride_d = 1;
  e.pad_d = 0;
  if (rank == 5) {
    e.in_d = x.shape[2];
    e.out_d = y.shape[2];
    e.kernel_d = attr(op, "kernel", 0, 2);
    e.stride_d = attr(op, "stride", 0, e.kernel_d);
    e.pad_d = attr(op, "padding", 0, 0);
  }
  e.in_h = x.shape[rank - 2];
  e.in_w = x.shape[rank - 1];
  e.out_h = y.shape[rank - 2];
  e.out_w = y.shape[rank - 1];
  e.kernel_h = attr(op, "kernel", h, 2);
  e.kernel_w = attr(op, "kernel", h + 1, 2);
  e.stride_h = attr(op, "stride", h, e.kernel_h);
  e.stride_w = attr(op, "stride", h + 1, e.kernel_w);
  e.pad_h = attr(op, "padding", h, 0);
  e.pad_w = attr(op, "padding", h + 1, 0);
  if (e.kernel_d <= 0 || e.kernel_h <= 0 || e.kernel_w <= 0 || e.stride_d <= 0 || e.stride_h <= 0 ||
      e.stride_w <= 0 || e.pad_d < 0 || e.pad_h < 0 || e.pad_w < 0 || e.out_d <= 0 ||
      e.out_h <= 0 || e.out_w <= 0) {
    fail(op, "pooling: inconsistent extents");
  }
  return e;
}

/// Average pooling (count_include_pad, as PyTorch's default) for 2-d and 3-d windows.
class AvgPool {
 public:
  AvgPool(const sim::Op& op, const sim::Tensor& xt, const sim::Tensor& yt) {
    const std::size_t rank = xt.shape.size();
    if ((rank != 4 && rank != 5) || yt.shape.size() != rank) {
      fail(op, "average pooling needs 4-d or 5-d tensors");
    }
    const std::size_t spatial = rank - 2;
    MEMPLAN_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    std::vector<int> window(spatial), pad(spatial), stride(spatial);
    for (std::size_t i = 0; i < spatial; ++i) {
      window[i] = as_int(op, attr(op, "kernel", i, 2));
      stride[i] = as_int(op, attr(op, "stride", i, window[i]));
      pad[i] = as_int(op, attr(op, "padding", i, 0));
    }
    MEMPLAN_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(
        pool_, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN,
        static_cast<int>(spatial), window.data(), pad.data(), stride.data()));
    x.set(op, xt.shape);
    y.set(op, yt.shape);
    std::vector<int> out(rank);
    MEMPLAN_CUDNN_CHECK(
        cudnnGetPoolingNdForwardOutputDim(pool_, x.get(), static_cast<int>(rank), out.data()));
    for (std::size_t i = 0; i < rank; ++i) {
      if (out[i] != yt.shape[i]) {
        fail(op, "the output's extents are not cuDNN's (ceil_mode is not supported)");
      }
    }
  }
  AvgPool(const AvgPool&) = delete;
  AvgPool& operator=(const AvgPool&) = delete;
  ~AvgPool() { MEMPLAN_CUDNN_REPORT(cudnnDestroyPoolingDescriptor(pool_)); }
  cudnnPoolingDescriptor_t get() const { return pool_; }
  TensorDesc x, y;

 private:
  cudnnPoolingDescriptor_t pool_ = nullptr;
};

class ReluDesc {
 public:
  ReluDesc() {
    MEMPLAN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_));
    MEMPLAN_CUDNN_CHECK(
        cudnnSetActivationDescriptor(d_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  ReluDesc(const ReluDesc&) = delete;
  ReluDesc& operator=(const ReluDesc&) = delete;
  ~ReluDesc() { MEMPLAN_CUDNN_REPORT(cudnnDestroyActivationDescriptor(d_)); }
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

/// Adaptive average pooling from x [N, C, (D,) H, W] to y of the same rank.
kernels::AdaptiveExtents adaptive_extents(const sim::Op& op, const sim::Tensor& x,
                                          const sim::Tensor& y) {
  const std::size_t rank = x.shape.size();
  if ((rank != 4 && rank != 5) || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, "adaptive_avg_pool maps [N, C, spatial...] to [N, C, spatial...] of rank 4 or 5");
  }
  kernels::AdaptiveExtents e{x.shape[0] * x.shape[1], 1, x.shape[rank - 2],
                             x.shape[rank - 1],       1, y.shape[rank - 2],
                             y.shape[rank - 1]};
  if (rank == 5) {
    e.in_d = x.shape[2];
    e.out_d = y.shape[2];
  }
  if (e.in_d <= 0 || e.in_h <= 0 || e.in_w <= 0 || e.out_d <= 0 || e.out_h <= 0 || e.out_w <= 0) {
    fail(op, "adaptive_avg_pool: empty extents");
  }
  return e;
}

/// Concat along dim 1: parts [N, C_i, ...] <-> whole [N, sum C_i, ...], one strided copy per part
/// (`gather`: parts into the whole; else the whole's slices into the parts).
void concat_copy(const sim::Op& op, cudaStream_t stream,
                 const std::vector<const sim::Tensor*>& parts, std::span<void* const> part_data,
                 void* whole, bool gather) {
  std::int64_t spatial = -1;
  std::int64_t total = 0;
  for (const sim::Tensor* t : parts) {
    if (t->shape.size() < 2) fail(op, "concat parts are [N, C, ...]");
    const std::int64_t sp = elements(*t) / (t->shape[0] * t->shape[1]);
    if (spatial >= 0 && sp != spatial) fail(op, "concat parts differ in spatial extents");
    spatial = sp;
    total += t->shape[1];
  }
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto row = static_cast<std::size_t>(parts[i]->shape[1] * spatial) * sizeof(float);
    const auto pitch = static_cast<std::size_t>(total * spatial) * sizeof(float);
    auto* slice =
        static_cast<std::byte*>(whole) + static_cast<std::size_t>(offset * spatial) * sizeof(float);
    const auto batch = static_cast<std::size_t>(parts[i]->shape[0]);
    if (gather) {
      MEMPLAN_CUDA_CHECK(cudaMemcpy2DAsync(slice, pitch, part_data[i], row, row, batch,
                                           cudaMemcpyDeviceToDevice, stream));
    } else {
      MEMPLAN_CUDA_CHECK(cudaMemcpy2DAsync(part_data[i], row, slice, pitch, row, batch,
                                           cudaMemcpyDeviceToDevice, stream));
    }
    offset += parts[i]->shape[1];
  }
}

/// Rows × classes of a softmax over the last dimension.
std::pair<std::int64_t, std::int64_t> softmax_rows(const sim::Op& op, const sim::Tensor& t) {
  if (t.shape.empty()) fail(op, "softmax needs a shaped tensor");
  const std::int64_t classes = t.shape.back();
  return {elements(t) / classes, classes};
}

/// Attention's extents from qkv [B, S, 3H] and scores [B, heads, S, S] (heads divide H).
kernels::AttentionExtents attention_extents(const sim::Op& op, const sim::Tensor& qkv,
                                            const sim::Tensor& scores) {
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0 || scores.shape.size() != 4) {
    fail(op, "attention reads qkv [B, S, 3H] and scores [B, heads, S, S]");
  }
  const kernels::AttentionExtents e{qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3, scores.shape[1]};
  if (e.batch <= 0 || e.sequence <= 0 || e.hidden <= 0 || e.heads <= 0 || e.hidden % e.heads != 0 ||
      scores.shape[0] != e.batch || scores.shape[2] != e.sequence ||
      scores.shape[3] != e.sequence) {
    fail(op, "attention: heads must divide the hidden size, scores must be [B, heads, S, S]");
  }
  return e;
}

/// An op's call with the executor's libraries, stream and the op's workspace buffer.
struct CudaCall : runtime::OpCall {
  CudaOpExecutor& executor;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  cudaStream_t stream;
  void* workspace;
  sim::Bytes workspace_bytes;
};

// Outputs of a linear or conv backward: [dx,] dw [, db] (null when not written).
std::array<float*, 3> grads(const CudaCall& c) {
  const runtime::GradOutputs has = c.grad_outputs();
  std::array<float*, 3> g{nullptr, nullptr, nullptr};
  std::size_t i = 0;
  if (has.dx) g[0] = f32(c.out[i++]);
  g[1] = f32(c.out[i++]);
  if (has.db) g[2] = f32(c.out[i]);
  return g;
}

namespace fwd {

void relu(const CudaCall& c) {
  const ReluDesc activation;
  TensorDesc d;
  d.set(c.op, {elements(c.t_in(0))});
  MEMPLAN_CUDNN_CHECK(cudnnActivationForward(c.cudnn, activation.get(), &kOne, d.get(), c.in[0],
                                             &kZero, d.get(), c.out[0]));
}

void relu6(const CudaCall& c) {
  MEMPLAN_CUDA_CHECK(
      kernels::relu6_forward(c.stream, elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void linear(const CudaCall& c) {
  // Row-major y[n×out] = x[n×in]·wᵀ with w[out×in] (PyTorch's layout). Column-major, cuBLAS
  // sees x as xᵀ (in×n) and w as wᵀ (in×out): yᵀ (out×n) = (wᵀ)ᵀ·xᵀ.
  const sim::Tensor& w = c.t_in(1);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(0)) / w.shape[1];
  const int rows = as_int(c.op, n), k = as_int(c.op, w.shape[1]), m = as_int(c.op, w.shape[0]);
  MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, rows, k, &kOne,
                                   f32(c.in[1]), k, f32(c.in[0]), k, &kZero, f32(c.out[0]), m));
  if (c.in.size() > 2)
    MEMPLAN_CUDA_CHECK(
        kernels::add_bias_rows(c.stream, n, w.shape[0], f32(c.in[2]), f32(c.out[0])));
}

void conv(const CudaCall& c) {
  if (c.in.size() < 2 || c.out.empty()) c.fail("convolution reads x, w [, b], writes y");
  const Conv d(c.op, c.t_in(0), c.t_in(1), c.t_out(0));
  const FoundAlgorithm& a =
      pick(c.op, c.executor.algorithms_of(c.op).forward, c.workspace_bytes, "forward");
  MEMPLAN_CUDNN_CHECK(
      cudnnConvolutionForward(c.cudnn, &kOne, d.x.get(), c.in[0], d.w.get(), c.in[1], d.conv.get(),
                              static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm), c.workspace,
                              a.workspace_bytes, &kZero, d.y.get(), c.out[0]));
  if (c.in.size() > 2) {
    MEMPLAN_CUDNN_CHECK(
        cudnnAddTensor(c.cudnn, &kOne, d.bias.get(), c.in[2], &kOne, d.y.get(), c.out[0]));
  }
}

void batch_norm(const CudaCall& c) {
  // [x, weight, bias (, running stats [2, C])] -> [y, save_mean, save_invstd]
  if (c.in.size() < 3 || c.out.size() != 3) {
    c.fail("batch_norm reads x, weight, bias [, running stats], writes y, mean, invstd");
  }
  const sim::Tensor& x = c.t_in(0);
  if (x.shape.size() < 2) c.fail("batch_norm needs [N, C, ...]");
  const std::int64_t channels = x.shape[1];
  TensorDesc xd, bn;
  xd.set(c.op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
  bn.set(c.op, {1, channels});
  // The running statistics (a fourth input) are left as they are, as the host backend leaves
  // them: a step's gradients do not depend on them, and a recompute must not update them twice.
  MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd.get(), c.in[0], xd.get(), c.out[0],
      bn.get(), c.in[1], c.in[2], 0.0, nullptr, nullptr,
      static_cast<double>(c.attr_f("epsilon", 1e-5f)), c.out[1], c.out[2]));
}

void max_pool(const CudaCall& c) {
  if (c.out.size() != 2) c.fail(c.op.layer.str() + " writes its output and its indices");
  MEMPLAN_CUDA_CHECK(kernels::max_pool_forward(c.stream, pool_extents(c.op, c.t_in(0), c.t_out(0)),
                                               f32(c.in[0]), f32(c.out[0]), i64(c.out[1])));
}

void dropout(const CudaCall& c) {
  // The host backend's mask: a function of the forward op (so a recompute redraws it) and of
  // the element index (host_backend::OpExecutor's dropout seed).
  if (c.out.size() != 2) c.fail("dropout writes its output and its mask");
  const float p = c.attr_f("p", 0.5f);
  if (!(p >= 0.0f && p < 1.0f)) c.fail("dropout: p must be in [0, 1)");
  const std::uint64_t seed = runtime::dropout_seed(c.op.id);
  const auto threshold =
      static_cast<std::uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
  MEMPLAN_CUDA_CHECK(kernels::dropout_forward(c.stream, elements(c.t_in(0)), threshold,
                                              1.0f / (1.0f - p), seed, f32(c.in[0]), f32(c.out[0]),
                                              static_cast<std::uint8_t*>(c.out[1])));
}

void adaptive_avg_pool(const CudaCall& c) {
  MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_forward(
      c.stream, adaptive_extents(c.op, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0])));
}

void concat(const CudaCall& c) {
  std::vector<const sim::Tensor*> parts;
  for (std::size_t i = 0; i < c.in.size(); ++i) parts.push_back(&c.t_in(i));
  concat_copy(c.op, c.stream, parts, c.in, c.out[0], true);
}

void avg_pool(const CudaCall& c) {
  const AvgPool p(c.op, c.t_in(0), c.t_out(0));
  MEMPLAN_CUDNN_CHECK(cudnnPoolingForward(c.cudnn, p.get(), &kOne, p.x.get(), c.in[0], &kZero,
                                          p.y.get(), c.out[0]));
}

void add(const CudaCall& c) {
  if (c.in.empty()) c.fail("add needs inputs");
  sum_into(c.stream, elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax(const CudaCall& c) {
  const auto [rows, classes] = softmax_rows(c.op, c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                          CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[0],
                                          &kZero, d.get(), c.out[0]));
}

void layer_norm(const CudaCall& c) {
  // [x, w, b] -> [y, mean, rstd]
  if (c.in.size() != 3 || c.out.size() != 3)
    c.fail("layer_norm reads x, w, b, writes y, mean, rstd");
  const auto [rows, h] = c.rows_of(c.t_in(0));
  MEMPLAN_CUDA_CHECK(kernels::layer_norm_forward(c.stream, rows, h, c.attr_f("epsilon", 1e-5f),
                                                 f32(c.in[0]), f32(c.in[1]), f32(c.in[2]),
                                                 f32(c.out[0]), f32(c.out[1]), f32(c.out[2])));
}

void gelu(const CudaCall& c) {
  if (c.in.empty() || c.out.empty()) c.fail("gelu reads x, writes y");
  MEMPLAN_CUDA_CHECK(
      kernels::gelu_forward(c.stream, elements(c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void embedding(const CudaCall& c) {
  // [indices, table] -> [y]
  const sim::Tensor& table = c.t_in(1);
  if (c.in.size() != 2 || c.out.empty() || table.shape.size() != 2) {
    c.fail("embedding reads indices and a 2-d table");
  }
  MEMPLAN_CUDA_CHECK(kernels::embedding_forward(c.stream, elements(c.t_in(0)), table.shape[1],
                                                table.shape[0], i64(c.in[0]), f32(c.in[1]),
                                                f32(c.out[0])));
}

void attention_scores(const CudaCall& c) {
  // [qkv] -> [scores]
  if (c.in.empty() || c.out.empty()) c.fail("attention_scores reads qkv, writes scores");
  MEMPLAN_CUDA_CHECK(kernels::attention_scores_forward(
      c.stream, attention_extents(c.op, c.t_in(0), c.t_out(0)), f32(c.in[0]), f32(c.out[0])));
}

void attention_context(const CudaCall& c) {
  // [probs, qkv] -> [y]
  if (c.in.size() != 2 || c.out.empty()) c.fail("attention_context reads probs and qkv");
  MEMPLAN_CUDA_CHECK(
      kernels::attention_context_forward(c.stream, attention_extents(c.op, c.t_in(1), c.t_in(0)),
                                         f32(c.in[0]), f32(c.in[1]), f32(c.out[0])));
}

void softmax_cross_entropy(const CudaCall& c) {
  if (c.in.size() != 2 || c.out.size() != 2) {
    fail(c.op,
         "softmax_cross_entropy reads logits and labels, writes the loss and the probabilities");
  }
  // Classes on the last axis; every other position is one sample (a sequence's tokens too).
  const auto [rows, classes] = c.rows_of(c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                          CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[0],
                                          &kZero, d.get(), c.out[1]));
  auto* log_probs = static_cast<float*>(
      c.executor.scratch(static_cast<std::size_t>(rows * classes) * sizeof(float)));
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(c.cudnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE,
                                          &kOne, d.get(), c.in[0], &kZero, d.get(), log_probs));
  MEMPLAN_CUDA_CHECK(
      kernels::cross_entropy_loss(c.stream, rows, classes, log_probs, i64(c.in[1]), f32(c.out[0])));
}

}  // namespace fwd

namespace bwd {

void relu(const CudaCall& c) {
  // [dy, y] -> [dx]: cuDNN's ReLU backward tests x > 0; y > 0 exactly where x > 0, so y is
  // passed for x (the forward input may be gone: PyTorch and the plans keep only y).
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu backward reads dy and y, writes dx");
  const ReluDesc activation;
  TensorDesc d;
  d.set(c.op, {elements(c.t_in(0))});
  MEMPLAN_CUDNN_CHECK(cudnnActivationBackward(c.cudnn, activation.get(), &kOne, d.get(), c.in[1],
                                              d.get(), c.in[0], d.get(), c.in[1], &kZero, d.get(),
                                              c.out[0]));
}

void relu6(const CudaCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("relu6 backward reads dy and y, writes dx");
  MEMPLAN_CUDA_CHECK(kernels::relu6_backward(c.stream, elements(c.t_in(0)), f32(c.in[0]),
                                             f32(c.in[1]), f32(c.out[0])));
}

void linear(const CudaCall& c) {
  // [dy, x, w] -> [dx,] dw [, db]; w[out×in]. Column-major views (see forward):
  // dxᵀ (in×n) = wᵀ (in×out) · dyᵀ (out×n); dwᵀ (in×out) = xᵀ (in×n) · dy (n×out).
  const auto g = grads(c);
  const sim::Tensor& w = c.t_in(2);
  if (w.shape.size() != 2) c.fail("linear needs a 2-d weight [out, in]");
  const std::int64_t n = elements(c.t_in(1)) / w.shape[1];
  const int rows = as_int(c.op, n), k = as_int(c.op, w.shape[1]), m = as_int(c.op, w.shape[0]);
  if (g[0] != nullptr) {
    MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k, rows, m, &kOne,
                                     f32(c.in[2]), k, f32(c.in[0]), m, &kZero, g[0], k));
  }
  MEMPLAN_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, m, rows, &kOne,
                                   f32(c.in[1]), k, f32(c.in[0]), m, &kZero, g[1], k));
  if (g[2] != nullptr)
    MEMPLAN_CUDA_CHECK(kernels::column_sums(c.stream, n, w.shape[0], f32(c.in[0]), g[2]));
}

void conv(const CudaCall& c) {
  // [dy, x, w] -> [dx,] dw [, db]
  const auto g = grads(c);
  const Conv d(c.op, c.t_in(1), c.t_in(2), c.t_in(0));
  const ConvAlgorithms& found = c.executor.algorithms_of(c.op);
  if (g[0] != nullptr) {
    const FoundAlgorithm& a = pick(c.op, found.backward_data, c.workspace_bytes, "backward-data");
    MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardData(
        c.cudnn, &kOne, d.w.get(), c.in[2], d.y.get(), c.in[0], d.conv.get(),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm), c.workspace, a.workspace_bytes,
        &kZero, d.x.get(), g[0]));
  }
  const FoundAlgorithm& a = pick(c.op, found.backward_filter, c.workspace_bytes, "backward-filter");
  MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      c.cudnn, &kOne, d.x.get(), c.in[1], d.y.get(), c.in[0], d.conv.get(),
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm), c.workspace, a.workspace_bytes,
      &kZero, d.w.get(), g[1]));
  if (g[2] != nullptr) {
    MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardBias(c.cudnn, &kOne, d.y.get(), c.in[0], &kZero,
                                                     d.bias.get(), g[2]));
  }
}

void batch_norm(const CudaCall& c) {
  // [dy, x, weight, save_mean, save_invstd] -> [dx,] dweight, dbias [, d running stats]: as the
  // host backend, a gradient of the running statistics (the zoo gives them one) is zero.
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 4) {
    c.fail("batch_norm backward reads dy, x, weight, mean, invstd, writes [dx,] dw, db");
  }
  const sim::Tensor& x = c.t_in(1);
  if (x.shape.size() < 2) c.fail("batch_norm needs [N, C, ...]");
  const bool has_dx = c.t_out(0).shape == x.shape;
  const std::size_t k = has_dx ? 1 : 0;
  if (c.out.size() < k + 2 || c.out.size() > k + 3) {
    c.fail("batch_norm backward writes [dx,] dw, db [, d running stats]");
  }
  const std::int64_t channels = x.shape[1];
  TensorDesc xd, bn;
  xd.set(c.op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
  bn.set(c.op, {1, channels});
  void* dx =
      has_dx ? c.out[0] : c.executor.scratch(static_cast<std::size_t>(elements(x)) * sizeof(float));
  MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, xd.get(), c.in[1], xd.get(),
      c.in[0], xd.get(), dx, bn.get(), c.in[2], c.out[k], c.out[k + 1],
      static_cast<double>(c.attr_f("epsilon", 1e-5f)), c.in[3], c.in[4]));
  if (c.out.size() == k + 3) {
    MEMPLAN_CUDA_CHECK(
        cudaMemsetAsync(c.out[k + 2], 0, static_cast<std::size_t>(c.t_out(k + 2).bytes), c.stream));
  }
}

void dropout(const CudaCall& c) {
  // [dy, mask] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("dropout backward reads dy and the mask");
  const float p = c.attr_f("p", 0.5f);
  MEMPLAN_CUDA_CHECK(
      kernels::dropout_backward(c.stream, elements(c.t_in(0)), 1.0f / (1.0f - p), f32(c.in[0]),
                                static_cast<const std::uint8_t*>(c.in[1]), f32(c.out[0])));
}

void adaptive_avg_pool(const CudaCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("adaptive_avg_pool backward reads dy and x");
  MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_backward(
      c.stream, adaptive_extents(c.op, c.t_out(0), c.t_in(0)), f32(c.in[0]), f32(c.out[0])));
}

void concat(const CudaCall& c) {
  // [dy] -> the gradient of every part (all parts: the split is by position)
  if (c.in.size() != 1) c.fail("concat backward reads dy");
  if (c.op.differentiates == sim::kNoOp ||
      c.workload.op(c.op.differentiates).inputs.size() != c.out.size()) {
    c.fail("concat backward must write the gradient of every part of its forward op");
  }
  std::vector<const sim::Tensor*> parts;
  for (std::size_t i = 0; i < c.out.size(); ++i) parts.push_back(&c.t_out(i));
  concat_copy(c.op, c.stream, parts, c.out, c.in[0], false);
}

void max_pool(const CudaCall& c) {
  // [dy, saved input, indices] -> [dx]
  if (c.in.size() != 3 || c.out.size() != 1)
    c.fail(c.op.layer.str() + " backward reads dy, x, indices");
  MEMPLAN_CUDA_CHECK(kernels::max_pool_backward(c.stream, pool_extents(c.op, c.t_out(0), c.t_in(0)),
                                                f32(c.in[0]), i64(c.in[2]), f32(c.out[0])));
}

void avg_pool(const CudaCall& c) {
  // [dy, x] -> [dx]. Average pooling's gradient does not depend on y; cuDNN's call takes a y
  // of y's extents, and dy is one.
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("average pooling backward reads dy and x");
  const AvgPool p(c.op, c.t_out(0), c.t_in(0));
  MEMPLAN_CUDNN_CHECK(cudnnPoolingBackward(c.cudnn, p.get(), &kOne, p.y.get(), c.in[0], p.y.get(),
                                           c.in[0], p.x.get(), c.in[1], &kZero, p.x.get(),
                                           c.out[0]));
}

void add(const CudaCall& c) {
  if (c.in.empty() || c.out.size() != 1) c.fail("add backward sums its inputs into one output");
  sum_into(c.stream, elements(c.t_out(0)), c.in, f32(c.out[0]));
}

void softmax(const CudaCall& c) {
  // [dy, y] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("softmax backward reads dy and y, writes dx");
  const auto [rows, classes] = softmax_rows(c.op, c.t_in(0));
  TensorDesc d;
  d.set(c.op, {rows, classes});
  MEMPLAN_CUDNN_CHECK(cudnnSoftmaxBackward(c.cudnn, CUDNN_SOFTMAX_ACCURATE,
                                           CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), c.in[1],
                                           d.get(), c.in[0], &kZero, d.get(), c.out[0]));
}

void layer_norm(const CudaCall& c) {
  // [dy, x, w, mean, rstd] -> [dx,] dw, db
  if (c.in.size() != 5 || c.out.size() < 2 || c.out.size() > 3) {
    c.fail("layer_norm backward reads dy, x, w, mean, rstd, writes [dx,] dw, db");
  }
  const bool has_dx = c.out.size() == 3;
  const std::size_t k = has_dx ? 1 : 0;
  const auto [rows, h] = c.rows_of(c.t_in(1));
  MEMPLAN_CUDA_CHECK(kernels::layer_norm_backward(
      c.stream, rows, h, f32(c.in[1]), f32(c.in[2]), f32(c.in[3]), f32(c.in[4]), f32(c.in[0]),
      has_dx ? f32(c.out[0]) : nullptr, f32(c.out[k]), f32(c.out[k + 1])));
}

void gelu(const CudaCall& c) {
  // [dy, x] -> [dx]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("gelu backward reads dy and x, writes dx");
  MEMPLAN_CUDA_CHECK(kernels::gelu_backward(c.stream, elements(c.t_in(0)), f32(c.in[0]),
                                            f32(c.in[1]), f32(c.out[0])));
}

void embedding(const CudaCall& c) {
  // [dy, indices] -> [dtable]
  const sim::Tensor& table = c.t_out(0);
  if (c.in.size() != 2 || c.out.size() != 1 || table.shape.size() != 2) {
    c.fail("embedding backward reads dy and indices, writes the table's gradient");
  }
  MEMPLAN_CUDA_CHECK(kernels::embedding_backward(c.stream, elements(c.t_in(1)), table.shape[1],
                                                 table.shape[0], i64(c.in[1]), f32(c.in[0]),
                                                 f32(c.out[0])));
}

void attention_scores(const CudaCall& c) {
  // [dscores, qkv] -> [dqkv]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("attention_scores backward reads dy and qkv");
  MEMPLAN_CUDA_CHECK(
      kernels::attention_scores_backward(c.stream, attention_extents(c.op, c.t_in(1), c.t_in(0)),
                                         f32(c.in[0]), f32(c.in[1]), f32(c.out[0])));
}

void attention_context(const CudaCall& c) {
  // [dy, probs, qkv] -> [dprobs, dqkv]
  if (c.in.size() != 3 || c.out.size() != 2) {
    c.fail("attention_context backward reads dy, probs, qkv, writes dprobs, dqkv");
  }
  MEMPLAN_CUDA_CHECK(kernels::attention_context_backward(
      c.stream, attention_extents(c.op, c.t_in(2), c.t_in(1)), f32(c.in[0]), f32(c.in[1]),
      f32(c.in[2]), f32(c.out[0]), f32(c.out[1])));
}

void softmax_cross_entropy(const CudaCall& c) {
  // [probs, labels] -> [dlogits]
  if (c.in.size() != 2 || c.out.size() != 1) c.fail("reads probs and labels, writes dlogits");
  const auto [rows, classes] = c.rows_of(c.t_in(0));
  MEMPLAN_CUDA_CHECK(kernels::cross_entropy_backward(c.stream, rows, classes, f32(c.in[0]),
                                                     i64(c.in[1]), f32(c.out[0])));
}

}  // namespace bwd

namespace update {

void sgd(const CudaCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  // runtime::SgdDefaults
  const float lr = c.attr_f("lr", 0.01f);
  const float momentum = c.attr_f("momentum", 0.9f);
  const float weight_decay = c.attr_f("weight_decay", 0.0f);
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    MEMPLAN_CUDA_CHECK(kernels::sgd_momentum(c.stream, n, lr, momentum, weight_decay, f32(c.in[i]),
                                             f32(c.in[k + i]), f32(c.in[2 * k + i])));
  }
}

void adam(const CudaCall& c) {
  const std::size_t k = runtime::update_group_size(c.workload, c.op);
  // The host's scalars (runtime::adam_step), so both backends take the same rounded values.
  const runtime::AdamStep s = runtime::adam_step(c.op);
  const kernels::AdamScalars a{s.beta1_weight,          s.beta2, s.beta2_weight, s.weight_decay,
                               s.bias_correction2_sqrt, s.eps,   s.neg_step_size};
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(c.t_in(i));
    MEMPLAN_CUDA_CHECK(kernels::adam(c.stream, n, a, f32(c.in[i]), f32(c.in[k + i]),
                                     f32(c.in[2 * k + i]), f32(c.in[3 * k + i])));
  }
}

}  // namespace update

/// The CUDA kernels of each layer, per phase (Note [Adding a layer] in sim/layer.hpp).
using Kernel = void (*)(const CudaCall&);
struct KernelRow {
  sim::Layer layer = sim::Layer::kGeneric;
  Kernel forward = nullptr;
  Kernel backward = nullptr;
  Kernel update = nullptr;
};

constexpr std::array<KernelRow, sim::kLayerCount> by_layer(std::initializer_list<KernelRow> rows) {
  std::array<KernelRow, sim::kLayerCount> table{};
  for (const KernelRow& r : rows) table[static_cast<std::size_t>(r.layer)] = r;
  return table;
}

using enum sim::Layer;
// clang-format off
constexpr std::array<KernelRow, sim::kLayerCount> kKernels = by_layer({
    {kConv2d, fwd::conv, bwd::conv, nullptr},
    {kConv3d, fwd::conv, bwd::conv, nullptr},
    {kLinear, fwd::linear, bwd::linear, nullptr},
    {kBatchNorm, fwd::batch_norm, bwd::batch_norm, nullptr},
    {kLayerNorm, fwd::layer_norm, bwd::layer_norm, nullptr},
    {kRelu, fwd::relu, bwd::relu, nullptr},
    {kRelu6, fwd::relu6, bwd::relu6, nullptr},
    {kGelu, fwd::gelu, bwd::gelu, nullptr},
    {kMaxPool2d, fwd::max_pool, bwd::max_pool, nullptr},
    {kMaxPool3d, fwd::max_pool, bwd::max_pool, nullptr},
    {kAvgPool2d, fwd::avg_pool, bwd::avg_pool, nullptr},
    {kAvgPool3d, fwd::avg_pool, bwd::avg_pool, nullptr},
    {kAdaptiveAvgPool, fwd::adaptive_avg_pool, bwd::adaptive_avg_pool, nullptr},
    {kDropout, fwd::dropout, bwd::dropout, nullptr},
    {kConcat, fwd::concat, bwd::concat, nullptr},
    {kAdd, fwd::add, bwd::add, nullptr},
    {kGradAccumulate, fwd::add, bwd::add, nullptr},
    {kSoftmax, fwd::softmax, bwd::softmax, nullptr},
    {kSoftmaxCrossEntropy, fwd::softmax_cross_entropy, bwd::softmax_cross_entropy, nullptr},
    {kEmbedding, fwd::embedding, bwd::embedding, nullptr},
    {kAttentionScores, fwd::attention_scores, bwd::attention_scores, nullptr},
    {kAttentionContext, fwd::attention_context, bwd::attention_context, nullptr},
    {kSgd, nullptr, nullptr, update::sgd},
    {kAdam, nullptr, nullptr, update::adam},
});
// clang-format on

}  // namespace

const ConvAlgorithms& CudaOpExecutor::algorithms_of(const sim::Op& op) {
  if (!conv_->contains(op.id)) find_for(op);
  return conv_->at(op.id);
}

void CudaOpExecutor::run(const sim::Op& op, std::span<void* const> operands,
                         sim::Bytes workspace_bytes) {
  const KernelRow& row = kKernels[static_cast<std::size_t>(op.layer.kind())];
  const Kernel kernel = op.phase == sim::Phase::kForward    ? row.forward
                        : op.phase == sim::Phase::kBackward ? row.backward
                                                            : row.update;
  if (kernel == nullptr) runtime::no_kernel(op, "CUDA");
  const std::size_t n_in = op.inputs.size();
  const std::size_t n_out = op.outputs.size();
  if (operands.size() < n_in + n_out) fail(op, "fewer operands than inputs and outputs");
  void* workspace = operands.size() > n_in + n_out ? operands[n_in + n_out] : nullptr;
  const CudaCall call{{w_, op, operands.subspan(0, n_in), operands.subspan(n_in, n_out)},
                      *this,
                      cudnn_,
                      cublas_,
                      stream_,
                      workspace,
                      workspace == nullptr ? 0 : workspace_bytes};
  kernel(call);
}

}  // namespace memplan::cuda_backend
