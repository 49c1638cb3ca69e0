// The CUDA backend's optimizer kernels (kernels.cuh): SGD with momentum and Adam, with rounded
// operations and no fused multiply-add, so that parameters match the host backend's bit for bit.
#include <cstdint>

#include "cuda_backend/kernel_launch.cuh"
#include "cuda_backend/kernels.cuh"

namespace memplan::cuda_backend::kernels {

namespace {

// ---- SGD
// ------------------------------------------------------------------------------------------

__global__ void sgd_momentum_kernel(std::int64_t n, float lr, float momentum, float weight_decay,
                                    float* w, const float* grad, float* velocity) {
  // Rounded operations, no fused multiply-add: the host backend's arithmetic, bit for bit.
  MEMPLAN_GRID_STRIDE(i, n) {
    const float g = __fadd_rn(grad[i], __fmul_rn(weight_decay, w[i]));
    const float v = __fadd_rn(__fmul_rn(momentum, velocity[i]), g);
    velocity[i] = v;
    w[i] = __fsub_rn(w[i], __fmul_rn(lr, v));
  }
}

// ---- Adam
// -----------------------------------------------------------------------------------------

__global__ void adam_kernel(std::int64_t n, AdamScalars a, float* w, const float* grad,
                            float* exp_avg, float* exp_avg_sq) {
  // Rounded operations, no fused multiply-add: runtime::adam_update's arithmetic, bit for bit.
  MEMPLAN_GRID_STRIDE(i, n) {
    float g = grad[i];
    if (a.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(a.weight_decay, w[i]));
    const float m = __fadd_rn(exp_avg[i], __fmul_rn(a.beta1_weight, __fsub_rn(g, exp_avg[i])));
    exp_avg[i] = m;
    const float v =
        __fadd_rn(__fmul_rn(exp_avg_sq[i], a.beta2), __fmul_rn(__fmul_rn(a.beta2_weight, g), g));
    exp_avg_sq[i] = v;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bias_correction2_sqrt), a.eps);
    w[i] = __fadd_rn(w[i], __fdiv_rn(__fmul_rn(a.neg_step_size, m), denom));
  }
}

}  // namespace

cudaError_t sgd_momentum(cudaStream_t s, std::int64_t n, float lr, float momentum,
                         float weight_decay, float* w, const float* grad, float* velocity) {
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, lr, momentum, weight_decay, w, grad,
                                                         velocity);
  return cudaGetLastError();
}

cudaError_t adam(cudaStream_t s, std::int64_t n, const AdamScalars& a, float* w, const float* grad,
                 float* exp_avg, float* exp_avg_sq) {
  adam_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, a, w, grad, exp_avg, exp_avg_sq);
  return cudaGetLastError();
}

}  // namespace memplan::cuda_backend::kernels
