// Convolutions (conv2d, conv3d) on cuDNN: their descriptors, the search for their algorithms
// (CudaOpExecutor::find_algorithms, ConvAlgorithms' figures) and the kernel table's forward and
// backward entries, which run the algorithm the op's workspace allows (cuda_op_executor.hpp).
#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/plan.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_op_executor.hpp"
#include "cuda_backend/cuda_ops.hpp"
#include "cuda_backend/cudnn_descriptors.hpp"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend {

namespace {

using ops::as_int;
using ops::TensorDesc;
using runtime::attr;
using runtime::fail;

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

// ---- CudaOpExecutor's algorithm search
// -------------------------------------------------------------------

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

const ConvAlgorithms& CudaOpExecutor::algorithms_of(const sim::Op& op) {
  if (!conv_->contains(op.id)) find_for(op);
  return conv_->at(op.id);
}

namespace ops {

namespace fwd {

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

}  // namespace fwd

namespace bwd {

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

}  // namespace bwd

}  // namespace ops

}  // namespace memplan::cuda_backend
