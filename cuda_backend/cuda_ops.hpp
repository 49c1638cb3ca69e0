#pragma once
// The entries of CudaOpExecutor's kernel table (cuda_op_executor.cpp), one function per layer and
// phase, each enqueuing one op on the executor's stream. They live in one file per family so that
// no file grows past a reader's reach: convolutions and their cuDNN algorithm search
// (conv_ops.cpp), pooling and concat (pooling_ops.cpp), the transformer's layers
// (transformer_ops.cpp), and linear, batch-norm, activations, dropout, add, softmax, the loss and
// the optimizers (layer_ops.cpp). Internal to cuda_backend/: CudaOpExecutor is the interface.
#include <array>
#include <span>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "cuda_backend/cuda_op_executor.hpp"
#include "runtime/op_call.hpp"

namespace memplan::cuda_backend::ops {

/// An op's call with the executor's libraries, stream and the op's workspace buffer.
struct CudaCall : runtime::OpCall {
  CudaOpExecutor& executor;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  cudaStream_t stream;
  void* workspace;
  sim::Bytes workspace_bytes;
};

/// Outputs of a linear or conv backward: [dx,] dw [, db] (null when not written).
std::array<float*, 3> grads(const CudaCall& c);

/// Forward ops: inputs then weights.
namespace fwd {
void conv(const CudaCall& c);
void linear(const CudaCall& c);
void batch_norm(const CudaCall& c);
void relu(const CudaCall& c);
void relu6(const CudaCall& c);
void dropout(const CudaCall& c);
void add(const CudaCall& c);
void softmax(const CudaCall& c);
void softmax_cross_entropy(const CudaCall& c);
void max_pool(const CudaCall& c);
void avg_pool(const CudaCall& c);
void adaptive_avg_pool(const CudaCall& c);
void concat(const CudaCall& c);
void layer_norm(const CudaCall& c);
void gelu(const CudaCall& c);
void embedding(const CudaCall& c);
void attention_scores(const CudaCall& c);
void attention_context(const CudaCall& c);
}  // namespace fwd

/// Backward ops: the output gradient first, then the saved tensors.
namespace bwd {
void conv(const CudaCall& c);
void linear(const CudaCall& c);
void batch_norm(const CudaCall& c);
void relu(const CudaCall& c);
void relu6(const CudaCall& c);
void dropout(const CudaCall& c);
void add(const CudaCall& c);
void softmax(const CudaCall& c);
void softmax_cross_entropy(const CudaCall& c);
void max_pool(const CudaCall& c);
void avg_pool(const CudaCall& c);
void adaptive_avg_pool(const CudaCall& c);
void concat(const CudaCall& c);
void layer_norm(const CudaCall& c);
void gelu(const CudaCall& c);
void embedding(const CudaCall& c);
void attention_scores(const CudaCall& c);
void attention_context(const CudaCall& c);
}  // namespace bwd

/// Optimizer steps: parameters, gradients and states in equal groups, updated in place.
namespace update {
void sgd(const CudaCall& c);
void adam(const CudaCall& c);
}  // namespace update

}  // namespace memplan::cuda_backend::ops
