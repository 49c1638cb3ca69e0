#include "cuda_backend/cuda_op_executor.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <stdexcept>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/kernels.cuh"
#include "sim/plan.hpp"

namespace memplan::cuda_backend {

namespace {

[[noreturn]] void fail(const sim::Op& op, const std::string& what) {
  throw std::runtime_error("op '" + op.name + "' (" + op.layer + ", " +
                           std::string(sim::to_string(op.phase)) + "): " + what);
}

std::int64_t elements(const sim::Tensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  return n;
}

float* f32(void* p) {
  return static_cast<float*>(p);
}
std::int64_t* i64(void* p) {
  return static_cast<std::int64_t*>(p);
}

/// Which of [dx,] dw [, db] a linear or convolution backward op writes
/// (host_backend::OpExecutor::split_grads).
struct GradOutputs {
  bool dx = false;
  bool db = false;
};
GradOutputs grad_outputs(const sim::Workload& w, const sim::Op& op) {
  const std::size_t n = op.outputs.size();
  if (op.inputs.size() != 3 || n == 0 || n > 3) {
    fail(op, op.layer + " backward reads dy, x and w, writes [dx,] dw [, db]");
  }
  GradOutputs has;
  if (op.differentiates != sim::kNoId) {
    has.db = w.op(op.differentiates).inputs.size() == 3;
  } else {
    has.db = n >= 2 && w.tensor(op.outputs.back()).shape.size() == 1;
  }
  const std::size_t without_dx = has.db ? 2 : 1;
  if (n != without_dx && n != without_dx + 1)
    fail(op, "output count does not match [dx,] dw [, db]");
  has.dx = n == without_dx + 1;
  return has;
}

int as_int(const sim::Op& op, std::int64_t v) {
  if (v < 0 || v > INT_MAX) fail(op, "an extent does not fit cuDNN's and cuBLAS's int");
  return static_cast<int>(v);
}

std::int64_t attr(const sim::Op& op, const char* name, std::size_t i, std::int64_t fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  const auto& v = it->second;
  return static_cast<std::int64_t>(v[std::min(i, v.size() - 1)]);
}

float attr_f(const sim::Op& op, const char* name, float fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  return static_cast<float>(it->second.front());
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
    const bool conv3d = op.layer == "conv3d";
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
    if (op.layer != "conv2d" && op.layer != "conv3d") continue;
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
    if (grad_outputs(w_, op).dx) {
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

void CudaOpExecutor::run(const sim::Op& op, std::span<void* const> operands,
                         sim::Bytes workspace_bytes) {
  const std::size_t n_in = op.inputs.size();
  const std::size_t n_out = op.outputs.size();
  if (operands.size() < n_in + n_out) fail(op, "fewer operands than inputs and outputs");
  const auto in = operands.subspan(0, n_in);
  const auto out = operands.subspan(n_in, n_out);
  void* workspace = operands.size() > n_in + n_out ? operands[n_in + n_out] : nullptr;
  if (workspace == nullptr) workspace_bytes = 0;
  switch (op.phase) {
    case sim::Phase::kForward:
      forward(op, in, out, workspace, workspace_bytes);
      break;
    case sim::Phase::kBackward:
      backward(op, in, out, workspace, workspace_bytes);
      break;
    case sim::Phase::kUpdate:
      update(op, in);
      break;
  }
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
  const std::size_t rank = op.layer.ends_with("3d") ? 5 : 4;
  if (x.shape.size() != rank || y.shape.size() != rank || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    fail(op, op.layer + " needs " + std::to_string(rank) + "-d tensors of the same N and C");
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

/// Rows × the last axis (layer-norm over the last axis).
std::pair<std::int64_t, std::int64_t> rows_of(const sim::Op& op, const sim::Tensor& t) {
  if (t.shape.empty() || t.shape.back() <= 0) fail(op, "needs a non-empty last axis");
  return {elements(t) / t.shape.back(), t.shape.back()};
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

}  // namespace

void CudaOpExecutor::forward(const sim::Op& op, std::span<void* const> in,
                             std::span<void* const> out, void* workspace,
                             sim::Bytes workspace_bytes) {
  const auto& t_in = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.inputs[i]); };
  const auto& t_out = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.outputs[i]); };
  if (op.layer == "relu") {
    const ReluDesc relu;
    TensorDesc d;
    d.set(op, {elements(t_in(0))});
    MEMPLAN_CUDNN_CHECK(
        cudnnActivationForward(cudnn_, relu.get(), &kOne, d.get(), in[0], &kZero, d.get(), out[0]));
  } else if (op.layer == "relu6") {
    MEMPLAN_CUDA_CHECK(kernels::relu6_forward(stream_, elements(t_in(0)), f32(in[0]), f32(out[0])));
  } else if (op.layer == "linear") {
    // Row-major y[n×out] = x[n×in]·wᵀ with w[out×in] (PyTorch's layout). Column-major, cuBLAS
    // sees x as xᵀ (in×n) and w as wᵀ (in×out): yᵀ (out×n) = (wᵀ)ᵀ·xᵀ.
    const sim::Tensor& w = t_in(1);
    if (w.shape.size() != 2) fail(op, "linear needs a 2-d weight [out, in]");
    const std::int64_t n = elements(t_in(0)) / w.shape[1];
    const int rows = as_int(op, n), k = as_int(op, w.shape[1]), m = as_int(op, w.shape[0]);
    MEMPLAN_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m, rows, k, &kOne,
                                     f32(in[1]), k, f32(in[0]), k, &kZero, f32(out[0]), m));
    if (in.size() > 2)
      MEMPLAN_CUDA_CHECK(kernels::add_bias_rows(stream_, n, w.shape[0], f32(in[2]), f32(out[0])));
  } else if (op.layer == "conv2d" || op.layer == "conv3d") {
    if (in.size() < 2 || out.empty()) fail(op, "convolution reads x, w [, b], writes y");
    const Conv c(op, t_in(0), t_in(1), t_out(0));
    if (!conv_->contains(op.id)) find_for(op);
    const FoundAlgorithm& a = pick(op, conv_->at(op.id).forward, workspace_bytes, "forward");
    MEMPLAN_CUDNN_CHECK(
        cudnnConvolutionForward(cudnn_, &kOne, c.x.get(), in[0], c.w.get(), in[1], c.conv.get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm), workspace,
                                a.workspace_bytes, &kZero, c.y.get(), out[0]));
    if (in.size() > 2) {
      MEMPLAN_CUDNN_CHECK(
          cudnnAddTensor(cudnn_, &kOne, c.bias.get(), in[2], &kOne, c.y.get(), out[0]));
    }
  } else if (op.layer == "batch_norm") {
    // [x, weight, bias (, running stats [2, C])] -> [y, save_mean, save_invstd]
    if (in.size() < 3 || out.size() != 3) {
      fail(op, "batch_norm reads x, weight, bias [, running stats], writes y, mean, invstd");
    }
    const sim::Tensor& x = t_in(0);
    if (x.shape.size() < 2) fail(op, "batch_norm needs [N, C, ...]");
    const std::int64_t channels = x.shape[1];
    TensorDesc xd, bn;
    xd.set(op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
    bn.set(op, {1, channels});
    // The running statistics (a fourth input) are left as they are, as the host backend leaves
    // them: a step's gradients do not depend on them, and a recompute must not update them twice.
    MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd.get(), in[0], xd.get(), out[0], bn.get(),
        in[1], in[2], 0.0, nullptr, nullptr, static_cast<double>(attr_f(op, "epsilon", 1e-5f)),
        out[1], out[2]));
  } else if (op.layer == "max_pool2d" || op.layer == "max_pool3d") {
    if (out.size() != 2) fail(op, op.layer + " writes its output and its indices");
    MEMPLAN_CUDA_CHECK(kernels::max_pool_forward(stream_, pool_extents(op, t_in(0), t_out(0)),
                                                 f32(in[0]), f32(out[0]), i64(out[1])));
  } else if (op.layer == "dropout") {
    // The host backend's mask: a function of the forward op (so a recompute redraws it) and of
    // the element index (host_backend::OpExecutor's dropout seed).
    if (out.size() != 2) fail(op, "dropout writes its output and its mask");
    const float p = attr_f(op, "p", 0.5f);
    if (!(p >= 0.0f && p < 1.0f)) fail(op, "dropout: p must be in [0, 1)");
    const std::uint64_t seed =
        0x6d656d706c616eULL ^ (static_cast<std::uint64_t>(op.id) * 0x9e3779b97f4a7c15ULL);
    const auto threshold =
        static_cast<std::uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
    MEMPLAN_CUDA_CHECK(kernels::dropout_forward(stream_, elements(t_in(0)), threshold,
                                                1.0f / (1.0f - p), seed, f32(in[0]), f32(out[0]),
                                                static_cast<std::uint8_t*>(out[1])));
  } else if (op.layer == "adaptive_avg_pool") {
    MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_forward(
        stream_, adaptive_extents(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0])));
  } else if (op.layer == "concat") {
    std::vector<const sim::Tensor*> parts;
    for (std::size_t i = 0; i < in.size(); ++i) parts.push_back(&t_in(i));
    concat_copy(op, stream_, parts, in, out[0], true);
  } else if (op.layer == "avg_pool2d" || op.layer == "avg_pool3d") {
    const AvgPool p(op, t_in(0), t_out(0));
    MEMPLAN_CUDNN_CHECK(
        cudnnPoolingForward(cudnn_, p.get(), &kOne, p.x.get(), in[0], &kZero, p.y.get(), out[0]));
  } else if (op.layer == "add" || op.layer == "grad_accumulate") {
    if (in.empty()) fail(op, "add needs inputs");
    sum_into(stream_, elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax") {
    const auto [rows, classes] = softmax_rows(op, t_in(0));
    TensorDesc d;
    d.set(op, {rows, classes});
    MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE,
                                            CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), in[0],
                                            &kZero, d.get(), out[0]));
  } else if (op.layer == "layer_norm") {
    // [x, w, b] -> [y, mean, rstd]
    if (in.size() != 3 || out.size() != 3)
      fail(op, "layer_norm reads x, w, b, writes y, mean, rstd");
    const auto [rows, h] = rows_of(op, t_in(0));
    MEMPLAN_CUDA_CHECK(kernels::layer_norm_forward(stream_, rows, h, attr_f(op, "epsilon", 1e-5f),
                                                   f32(in[0]), f32(in[1]), f32(in[2]), f32(out[0]),
                                                   f32(out[1]), f32(out[2])));
  } else if (op.layer == "gelu") {
    if (in.empty() || out.empty()) fail(op, "gelu reads x, writes y");
    MEMPLAN_CUDA_CHECK(kernels::gelu_forward(stream_, elements(t_in(0)), f32(in[0]), f32(out[0])));
  } else if (op.layer == "embedding") {
    // [indices, table] -> [y]
    const sim::Tensor& table = t_in(1);
    if (in.size() != 2 || out.empty() || table.shape.size() != 2) {
      fail(op, "embedding reads indices and a 2-d table");
    }
    MEMPLAN_CUDA_CHECK(kernels::embedding_forward(stream_, elements(t_in(0)), table.shape[1],
                                                  table.shape[0], i64(in[0]), f32(in[1]),
                                                  f32(out[0])));
  } else if (op.layer == "attention_scores") {
    // [qkv] -> [scores]
    if (in.empty() || out.empty()) fail(op, "attention_scores reads qkv, writes scores");
    MEMPLAN_CUDA_CHECK(kernels::attention_scores_forward(
        stream_, attention_extents(op, t_in(0), t_out(0)), f32(in[0]), f32(out[0])));
  } else if (op.layer == "attention_context") {
    // [probs, qkv] -> [y]
    if (in.size() != 2 || out.empty()) fail(op, "attention_context reads probs and qkv");
    MEMPLAN_CUDA_CHECK(kernels::attention_context_forward(
        stream_, attention_extents(op, t_in(1), t_in(0)), f32(in[0]), f32(in[1]), f32(out[0])));
  } else if (op.layer == "softmax_cross_entropy") {
    if (in.size() != 2 || out.size() != 2) {
      fail(op,
           "softmax_cross_entropy reads logits and labels, writes the loss and the probabilities");
    }
    // Classes on the last axis; every other position is one sample (a sequence's tokens too).
    const auto [rows, classes] = rows_of(op, t_in(0));
    TensorDesc d;
    d.set(op, {rows, classes});
    MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE,
                                            CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), in[0],
                                            &kZero, d.get(), out[1]));
    auto* log_probs =
        static_cast<float*>(scratch(static_cast<std::size_t>(rows * classes) * sizeof(float)));
    MEMPLAN_CUDNN_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE,
                                            &kOne, d.get(), in[0], &kZero, d.get(), log_probs));
    MEMPLAN_CUDA_CHECK(
        kernels::cross_entropy_loss(stream_, rows, classes, log_probs, i64(in[1]), f32(out[0])));
  } else {
    fail(op, "no CUDA kernel for this layer type");
  }
}

void CudaOpExecutor::backward(const sim::Op& op, std::span<void* const> in,
                              std::span<void* const> out, void* workspace,
                              sim::Bytes workspace_bytes) {
  const auto& t_in = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.inputs[i]); };
  const auto& t_out = [&](std::size_t i) -> const sim::Tensor& { return w_.tensor(op.outputs[i]); };
  // Outputs of a linear or conv backward: [dx,] dw [, db].
  const auto split = [&] {
    const GradOutputs has = grad_outputs(w_, op);
    std::array<float*, 3> g{nullptr, nullptr, nullptr};
    std::size_t i = 0;
    if (has.dx) g[0] = f32(out[i++]);
    g[1] = f32(out[i++]);
    if (has.db) g[2] = f32(out[i]);
    return g;
  };
  if (op.layer == "relu") {
    // [dy, y] -> [dx]: cuDNN's ReLU backward tests x > 0; y > 0 exactly where x > 0, so y is
    // passed for x (the forward input may be gone: PyTorch and the plans keep only y).
    if (in.size() != 2 || out.size() != 1) fail(op, "relu backward reads dy and y, writes dx");
    const ReluDesc relu;
    TensorDesc d;
    d.set(op, {elements(t_in(0))});
    MEMPLAN_CUDNN_CHECK(cudnnActivationBackward(cudnn_, relu.get(), &kOne, d.get(), in[1], d.get(),
                                                in[0], d.get(), in[1], &kZero, d.get(), out[0]));
  } else if (op.layer == "relu6") {
    // [dy, y] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "relu6 backward reads dy and y, writes dx");
    MEMPLAN_CUDA_CHECK(
        kernels::relu6_backward(stream_, elements(t_in(0)), f32(in[0]), f32(in[1]), f32(out[0])));
  } else if (op.layer == "linear") {
    // [dy, x, w] -> [dx,] dw [, db]; w[out×in]. Column-major views (see forward):
    // dxᵀ (in×n) = wᵀ (in×out) · dyᵀ (out×n); dwᵀ (in×out) = xᵀ (in×n) · dy (n×out).
    const auto g = split();
    const sim::Tensor& w = t_in(2);
    if (w.shape.size() != 2) fail(op, "linear needs a 2-d weight [out, in]");
    const std::int64_t n = elements(t_in(1)) / w.shape[1];
    const int rows = as_int(op, n), k = as_int(op, w.shape[1]), m = as_int(op, w.shape[0]);
    if (g[0] != nullptr) {
      MEMPLAN_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, k, rows, m, &kOne,
                                       f32(in[2]), k, f32(in[0]), m, &kZero, g[0], k));
    }
    MEMPLAN_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, k, m, rows, &kOne,
                                     f32(in[1]), k, f32(in[0]), m, &kZero, g[1], k));
    if (g[2] != nullptr)
      MEMPLAN_CUDA_CHECK(kernels::column_sums(stream_, n, w.shape[0], f32(in[0]), g[2]));
  } else if (op.layer == "conv2d" || op.layer == "conv3d") {
    // [dy, x, w] -> [dx,] dw [, db]
    const auto g = split();
    const Conv c(op, t_in(1), t_in(2), t_in(0));
    if (!conv_->contains(op.id)) find_for(op);
    const ConvAlgorithms& found = conv_->at(op.id);
    if (g[0] != nullptr) {
      const FoundAlgorithm& a = pick(op, found.backward_data, workspace_bytes, "backward-data");
      MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardData(
          cudnn_, &kOne, c.w.get(), in[2], c.y.get(), in[0], c.conv.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm), workspace, a.workspace_bytes,
          &kZero, c.x.get(), g[0]));
    }
    const FoundAlgorithm& a = pick(op, found.backward_filter, workspace_bytes, "backward-filter");
    MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cudnn_, &kOne, c.x.get(), in[1], c.y.get(), in[0], c.conv.get(),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm), workspace, a.workspace_bytes,
        &kZero, c.w.get(), g[1]));
    if (g[2] != nullptr) {
      MEMPLAN_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &kOne, c.y.get(), in[0], &kZero,
                                                       c.bias.get(), g[2]));
    }
  } else if (op.layer == "batch_norm") {
    // [dy, x, weight, save_mean, save_invstd] -> [dx,] dweight, dbias [, d running stats]: as the
    // host backend, a gradient of the running statistics (the zoo gives them one) is zero.
    if (in.size() != 5 || out.size() < 2 || out.size() > 4) {
      fail(op, "batch_norm backward reads dy, x, weight, mean, invstd, writes [dx,] dw, db");
    }
    const sim::Tensor& x = t_in(1);
    if (x.shape.size() < 2) fail(op, "batch_norm needs [N, C, ...]");
    const bool has_dx = t_out(0).shape == x.shape;
    const std::size_t k = has_dx ? 1 : 0;
    if (out.size() < k + 2 || out.size() > k + 3) {
      fail(op, "batch_norm backward writes [dx,] dw, db [, d running stats]");
    }
    const std::int64_t channels = x.shape[1];
    TensorDesc xd, bn;
    xd.set(op, {x.shape[0], channels, elements(x) / (x.shape[0] * channels)});
    bn.set(op, {1, channels});
    void* dx = has_dx ? out[0] : scratch(static_cast<std::size_t>(elements(x)) * sizeof(float));
    MEMPLAN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, xd.get(), in[1], xd.get(),
        in[0], xd.get(), dx, bn.get(), in[2], out[k], out[k + 1],
        static_cast<double>(attr_f(op, "epsilon", 1e-5f)), in[3], in[4]));
    if (out.size() == k + 3) {
      MEMPLAN_CUDA_CHECK(
          cudaMemsetAsync(out[k + 2], 0, static_cast<std::size_t>(t_out(k + 2).bytes), stream_));
    }
  } else if (op.layer == "dropout") {
    // [dy, mask] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "dropout backward reads dy and the mask");
    const float p = attr_f(op, "p", 0.5f);
    MEMPLAN_CUDA_CHECK(
        kernels::dropout_backward(stream_, elements(t_in(0)), 1.0f / (1.0f - p), f32(in[0]),
                                  static_cast<const std::uint8_t*>(in[1]), f32(out[0])));
  } else if (op.layer == "adaptive_avg_pool") {
    // [dy, x] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "adaptive_avg_pool backward reads dy and x");
    MEMPLAN_CUDA_CHECK(kernels::adaptive_avg_pool_backward(
        stream_, adaptive_extents(op, t_out(0), t_in(0)), f32(in[0]), f32(out[0])));
  } else if (op.layer == "concat") {
    // [dy] -> the gradient of every part (all parts: the split is by position)
    if (in.size() != 1) fail(op, "concat backward reads dy");
    if (op.differentiates == sim::kNoId || w_.op(op.differentiates).inputs.size() != out.size()) {
      fail(op, "concat backward must write the gradient of every part of its forward op");
    }
    std::vector<const sim::Tensor*> parts;
    for (std::size_t i = 0; i < out.size(); ++i) parts.push_back(&t_out(i));
    concat_copy(op, stream_, parts, out, in[0], false);
  } else if (op.layer == "max_pool2d" || op.layer == "max_pool3d") {
    // [dy, saved input, indices] -> [dx]
    if (in.size() != 3 || out.size() != 1) fail(op, op.layer + " backward reads dy, x, indices");
    MEMPLAN_CUDA_CHECK(kernels::max_pool_backward(stream_, pool_extents(op, t_out(0), t_in(0)),
                                                  f32(in[0]), i64(in[2]), f32(out[0])));
  } else if (op.layer == "avg_pool2d" || op.layer == "avg_pool3d") {
    // [dy, x] -> [dx]. Average pooling's gradient does not depend on y; cuDNN's call takes a y
    // of y's extents, and dy is one.
    if (in.size() != 2 || out.size() != 1) fail(op, "average pooling backward reads dy and x");
    const AvgPool p(op, t_out(0), t_in(0));
    MEMPLAN_CUDNN_CHECK(cudnnPoolingBackward(cudnn_, p.get(), &kOne, p.y.get(), in[0], p.y.get(),
                                             in[0], p.x.get(), in[1], &kZero, p.x.get(), out[0]));
  } else if (op.layer == "add" || op.layer == "grad_accumulate") {
    if (in.empty() || out.size() != 1) fail(op, "add backward sums its inputs into one output");
    sum_into(stream_, elements(t_out(0)), in, f32(out[0]));
  } else if (op.layer == "softmax") {
    // [dy, y] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "softmax backward reads dy and y, writes dx");
    const auto [rows, classes] = softmax_rows(op, t_in(0));
    TensorDesc d;
    d.set(op, {rows, classes});
    MEMPLAN_CUDNN_CHECK(cudnnSoftmaxBackward(cudnn_, CUDNN_SOFTMAX_ACCURATE,
                                             CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d.get(), in[1],
                                             d.get(), in[0], &kZero, d.get(), out[0]));
  } else if (op.layer == "layer_norm") {
    // [dy, x, w, mean, rstd] -> [dx,] dw, db
    if (in.size() != 5 || out.size() < 2 || out.size() > 3) {
      fail(op, "layer_norm backward reads dy, x, w, mean, rstd, writes [dx,] dw, db");
    }
    const bool has_dx = out.size() == 3;
    const std::size_t k = has_dx ? 1 : 0;
    const auto [rows, h] = rows_of(op, t_in(1));
    MEMPLAN_CUDA_CHECK(kernels::layer_norm_backward(
        stream_, rows, h, f32(in[1]), f32(in[2]), f32(in[3]), f32(in[4]), f32(in[0]),
        has_dx ? f32(out[0]) : nullptr, f32(out[k]), f32(out[k + 1])));
  } else if (op.layer == "gelu") {
    // [dy, x] -> [dx]
    if (in.size() != 2 || out.size() != 1) fail(op, "gelu backward reads dy and x, writes dx");
    MEMPLAN_CUDA_CHECK(
        kernels::gelu_backward(stream_, elements(t_in(0)), f32(in[0]), f32(in[1]), f32(out[0])));
  } else if (op.layer == "embedding") {
    // [dy, indices] -> [dtable]
    const sim::Tensor& table = t_out(0);
    if (in.size() != 2 || out.size() != 1 || table.shape.size() != 2) {
      fail(op, "embedding backward reads dy and indices, writes the table's gradient");
    }
    MEMPLAN_CUDA_CHECK(kernels::embedding_backward(stream_, elements(t_in(1)), table.shape[1],
                                                   table.shape[0], i64(in[1]), f32(in[0]),
                                                   f32(out[0])));
  } else if (op.layer == "attention_scores") {
    // [dscores, qkv] -> [dqkv]
    if (in.size() != 2 || out.size() != 1) fail(op, "attention_scores backward reads dy and qkv");
    MEMPLAN_CUDA_CHECK(kernels::attention_scores_backward(
        stream_, attention_extents(op, t_in(1), t_in(0)), f32(in[0]), f32(in[1]), f32(out[0])));
  } else if (op.layer == "attention_context") {
    // [dy, probs, qkv] -> [dprobs, dqkv]
    if (in.size() != 3 || out.size() != 2) {
      fail(op, "attention_context backward reads dy, probs, qkv, writes dprobs, dqkv");
    }
    MEMPLAN_CUDA_CHECK(kernels::attention_context_backward(
        stream_, attention_extents(op, t_in(2), t_in(1)), f32(in[0]), f32(in[1]), f32(in[2]),
        f32(out[0]), f32(out[1])));
  } else if (op.layer == "softmax_cross_entropy") {
    // [probs, labels] -> [dlogits]
    if (in.size() != 2 || out.size() != 1) fail(op, "reads probs and labels, writes dlogits");
    const auto [rows, classes] = rows_of(op, t_in(0));
    MEMPLAN_CUDA_CHECK(kernels::cross_entropy_backward(stream_, rows, classes, f32(in[0]),
                                                       i64(in[1]), f32(out[0])));
  } else {
    fail(op, "no CUDA kernel for this layer type");
  }
}

void CudaOpExecutor::update(const sim::Op& op, std::span<void* const> in) {
  if (op.layer != "sgd") fail(op, "no CUDA kernel for this update");
  if (in.size() % 3 != 0) fail(op, "sgd reads params, grads and momentum buffers (3 groups)");
  // host_backend::SgdDefaults
  const float lr = attr_f(op, "lr", 0.01f);
  const float momentum = attr_f(op, "momentum", 0.9f);
  const float weight_decay = attr_f(op, "weight_decay", 0.0f);
  const std::size_t k = in.size() / 3;
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(w_.tensor(op.inputs[i]));
    if (elements(w_.tensor(op.inputs[k + i])) != n ||
        elements(w_.tensor(op.inputs[2 * k + i])) != n) {
      fail(op, "param, grad and momentum " + std::to_string(i) + " differ in size");
    }
    MEMPLAN_CUDA_CHECK(kernels::sgd_momentum(stream_, n, lr, momentum, weight_decay, f32(in[i]),
                                             f32(in[k + i]), f32(in[2 * k + i])));
  }
}

}  // namespace memplan::cuda_backend
