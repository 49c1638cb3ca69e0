// CudaOpExecutor's libraries, scratch and dispatch: the kernel table. Its entries are in one
// file per family (cuda_ops.hpp); the search for convolution algorithms is in conv_ops.cpp.
#include "cuda_backend/cuda_op_executor.hpp"

#include <array>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_ops.hpp"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend {

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

namespace {

using ops::CudaCall;
using runtime::fail;
namespace fwd = ops::fwd;
namespace bwd = ops::bwd;
namespace update = ops::update;

/// The CUDA kernels of each layer, per phase (Note [Adding a layer] in core/layer.hpp).
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

void CudaOpExecutor::run(const sim::Op& op, std::span<void* const> operands,
                         sim::Bytes workspace_bytes) {
  const KernelRow& row = kKernels[static_cast<std::size_t>(op.layer.kind())];
  const Kernel kernel = op.phase == sim::Phase::kForward    ? row.forward
                        : op.phase == sim::Phase::kBackward ? row.backward
                                                            : row.update;
  if (kernel == nullptr) runtime::no_kernel(op, "CUDA");
  runtime::refuse_unsupported(op, "CUDA");
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
