#include "zoo/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.hpp"

namespace memplan::zoo {
namespace {

// Note [Cost model calibration]
// Factors were fitted to the per-operator CUDA kernel time of a real training step: torchvision
// ResNet-50, batch 32, SGD, fp32, one Tesla V100 (the Kineto sample in
// ../shared/data/kineto, profiler step 6, 97.5 ms of kernels in a 174 ms step). Kernel time per
// operator type there (ms): conv forward 21.1, conv backward 44.7 (input 21.8 + weight 23.0),
// batch-norm forward 5.7 and backward 10.1, ReLU forward 3.0 and backward 4.5, residual add 2.6,
// gradient accumulation 2.7, SGD and zero_grad 1.5, max-pool 0.24 + 0.78, everything else < 0.2.
// The resulting factors agree with what is published for the same kernels:
//   - cuDNN convolutions reach 70-80% of FP32 peak on Volta with the fastest algorithm
//     (Chetlur et al. 2014; NVIDIA's Deep Learning Performance Guide), the workspace-free
//     implicit GEMM about half of that (vDNN, Rhu et al. 2016, fig. 12: memory-optimal
//     algorithms cost 1.5-2x);
//   - cuBLAS SGEMM reaches about 75% of peak on large matrices;
//   - simple element-wise kernels (ReLU, add, gradient accumulation) stream at about 90% of the
//     bandwidth, as BabelStream measures on V100 HBM2 (Deakin et al. 2018: ~830 of 900 GB/s);
//     batch-norm reaches about half, reading its input twice (statistics, then normalisation).
// Every kernel costs at least kKernelOverheadNs: the smallest kernels in the profile (SGD's
// per-parameter mul_/add_) take 2-3 us each.
// Tensor cores (Note [Training precision] in zoo/precision.hpp): the rule is that cuBLAS and cuDNN
// reach the same fraction of a tensor-core peak as of the CUDA cores', so the factors below apply
// to the matrix rates unchanged; nothing was refitted. Checked against the kernels of real steps
// (bench/zoo-vs-recorded.sh, docs/zoo.md):
//   - the 16-bit GEMMs whose dimensions are multiples of 8 reach 64% of the BF16 peak in the H100
//     profile of GPT-2 small (traces/kineto-h100: M = 4096, K = 768 or 3072) and 77% in the H200
//     profile of traces/kineto-h200's gpt_blocks (M = 8192, K = 1024 or 4096), where the table
//     gives 0.75 forward, 0.70 backward;
//   - ResNet-50's fp16 convolutions (batch 64, channels_last) take 4.8 ms of kernels on the H100
//     where the model gives 3.8 ms: cuDNN's tensor-core convolutions fall short of the table's
//     0.80 / 0.75 by about a fifth there;
//   - not modeled: a 16-bit GEMM whose leading dimension is not a multiple of 8 elements (16
//     bytes, NVIDIA's alignment for tensor cores) runs cuBLAS's align1 fallback kernels: GPT-2's
//     LM head over 50,257 words at 10-15% of the BF16 peak.
constexpr sim::Nanoseconds kKernelOverheadNs = 2'500;
constexpr double kMemoryOptimalSlowdown = 1.8;  // implicit GEMM without workspace vs the fastest

struct Row {
  sim::Layer layer;
  Efficiency forward;
  Efficiency backward;
};

// compute, memory efficiency per layer type; bytes_moved counts every input and output once, so
// a kernel that reads its input twice shows up as a lower memory efficiency.
constexpr std::array<Row, 25> kTable{{
    {sim::Layer::kConv2d, {0.80, 0.70}, {0.75, 0.70}},
    {sim::Layer::kConv3d,
     {0.60, 0.70},
     {0.55, 0.70}},  // 3D convs: cuDNN's Ndim kernels are less tuned
    {sim::Layer::kLinear, {0.75, 0.70}, {0.70, 0.70}},
    {sim::Layer::kAttentionScores, {0.60, 0.70}, {0.55, 0.70}},
    {sim::Layer::kAttentionContext, {0.60, 0.70}, {0.55, 0.70}},
    {sim::Layer::kBatchNorm, {0.50, 0.57}, {0.50, 0.48}},
    {sim::Layer::kLayerNorm, {0.50, 0.55}, {0.50, 0.50}},
    {sim::Layer::kRelu, {0.50, 0.90}, {0.50, 0.90}},
    {sim::Layer::kRelu6, {0.50, 0.90}, {0.50, 0.90}},
    {sim::Layer::kGelu, {0.50, 0.70}, {0.50, 0.70}},
    {sim::Layer::kAdd, {0.50, 0.90}, {0.50, 0.90}},
    {sim::Layer::kGradAccumulate, {0.50, 0.90}, {0.50, 0.90}},
    {sim::Layer::kDropout, {0.50, 0.65}, {0.50, 0.70}},
    {sim::Layer::kSoftmax, {0.50, 0.60}, {0.50, 0.60}},
    {sim::Layer::kSoftmaxCrossEntropy, {0.50, 0.60}, {0.50, 0.60}},
    {sim::Layer::kMaxPool2d, {0.50, 0.60}, {0.50, 0.30}},  // backward scatters through indices
    {sim::Layer::kMaxPool3d, {0.50, 0.50}, {0.50, 0.30}},
    {sim::Layer::kAvgPool2d, {0.50, 0.60}, {0.50, 0.50}},
    {sim::Layer::kAvgPool3d, {0.50, 0.50}, {0.50, 0.40}},
    {sim::Layer::kAdaptiveAvgPool, {0.50, 0.60}, {0.50, 0.50}},
    {sim::Layer::kConcat, {0.50, 0.70}, {0.50, 0.70}},
    {sim::Layer::kEmbedding, {0.50, 0.50}, {0.50, 0.30}},  // backward is an index-add
    {sim::Layer::kSgd, {0.50, 0.70}, {0.50, 0.70}},
    {sim::Layer::kAdam, {0.50, 0.70}, {0.50, 0.70}},     // streams 7 tensors as SGD streams 5
    {sim::Layer::kGeneric, {0.50, 0.50}, {0.50, 0.50}},  // anything else
}};

}  // namespace

CostModel::CostModel(const Device& device, Precision precision)
    : device_(device), matrix_flops_per_s_(matrix_flops_per_s(device, precision)) {
  MEMPLAN_CHECK(matrix_flops_per_s_ > 0, "the zoo refuses a precision its device has no rate for");
}

Efficiency CostModel::efficiency(sim::Layer layer, sim::Phase phase) {
  const Row* row = &kTable.back();
  for (const Row& r : kTable) {
    if (r.layer == layer) {
      row = &r;
      break;
    }
  }
  return phase == sim::Phase::kBackward ? row->backward : row->forward;
}

sim::Nanoseconds CostModel::duration(const sim::Op& op, bool memory_optimal) const {
  Efficiency e = efficiency(op.layer.kind(), op.phase);
  if (memory_optimal) e.compute /= kMemoryOptimalSlowdown;
  const double flops = op.flops.value_or(0.0);
  const double bytes = static_cast<double>(op.bytes_moved.value_or(0));
  const sim::LayerFamily family = op.layer.rule().family;
  const bool matrix =
      family == sim::LayerFamily::kConvolution || family == sim::LayerFamily::kMatmul;
  const double peak = matrix ? matrix_flops_per_s_ : device_.peak_flops_per_s;
  const double compute_s = flops / (peak * e.compute);
  const double memory_s = bytes / (device_.memory_bytes_per_s * e.memory);
  const double seconds = std::max(compute_s, memory_s);
  return kKernelOverheadNs + static_cast<sim::Nanoseconds>(std::llround(seconds * 1e9));
}

void CostModel::apply(sim::Workload& workload) const {
  for (sim::Op& op : workload.ops) {
    op.duration_ns = duration(op, false);
    for (sim::Algorithm& a : op.algorithms)
      a.duration_ns = duration(op, a.name == "memory_optimal");
  }
}

}  // namespace memplan::zoo
