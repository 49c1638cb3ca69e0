#include "zoo/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <utility>

#include "core/check.hpp"
#include "zoo/network.hpp"

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
// Tensor cores (Note [Training precision] in zoo/precision.hpp): the rule is that cuBLAS reaches
// the same fraction of a tensor-core peak as of the CUDA cores', so the factors below apply to the
// matrix rates unchanged; cuDNN's convolutions do not (Note [Tensor-core convolutions]). Checked
// against the kernels of real steps (bench/zoo-vs-recorded.sh, docs/zoo.md):
//   - the 16-bit GEMMs whose dimensions are multiples of 8 reach 64% of the BF16 peak in the H100
//     profile of GPT-2 small (traces/kineto-h100: M = 4096, K = 768 or 3072) and 77% in the H200
//     profile of traces/kineto-h200's gpt_blocks (M = 8192, K = 1024 or 4096), where the table
//     gives 0.75 forward, 0.70 backward;
//   - ResNet-50's fp16 convolutions (batch 64, channels_last) take 6.2 ms of kernels on the H100
//     where the table's factors give 3.8 ms: the tensor-core convolutions' own factors come from
//     there (Note [Tensor-core convolutions]);
//   - a 16-bit GEMM whose leading dimension is not a multiple of 8 elements (16 bytes, NVIDIA's
//     alignment for tensor cores) runs cuBLAS's align1 fallback kernels: GPT-2's LM head over
//     50,257 words at 10-15% of the BF16 peak (Note [Unaligned GEMMs]).
// The fused attention (scaled_dot_product_attention, Note [Fused attention] in
// zoo/attention.hpp) runs PyTorch's FlashAttention-2 kernels, whose share of the H100's BF16
// peak Shah et al. measured (FlashAttention-3, 2024, figures 5 and 6: FlashAttention-2 on an H100
// SXM5 in BF16, 16k tokens a batch): forward 180-309 TFLOP/s at 512 tokens a sequence rising to
// 299-370 at 16k (head widths 64 to 256), backward 198-214 rising to 291-322 — at long sequences
// 0.30-0.37 and 0.29-0.33 of the 989.4 dense peak; FlashAttention-2 does not use Hopper's
// warpgroup MMA ("35% utilization on H100"). The table takes 0.35 forward and 0.30 backward, with
// the flops of the FlashAttention papers' accounting (4·B·S²·H forward, half with the causal
// mask; 2.5 times that backward). On the A100, whose mma instructions FlashAttention-2 was
// written for, it reaches up to 73% forward and 63% backward (Dao 2023, §4.1): there the model's
// fused attention is about twice as slow as the kernel's best.
constexpr sim::Nanoseconds kKernelOverheadNs = 2'500;

// Note [Tensor-core convolutions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDNN's tensor-core convolutions do not reach the share of the tensor-core peak its CUDA-core
// ones reach of theirs (the table's 0.80 forward, 0.75 backward): in the H100 profile of
// torchvision's ResNet-50 (traces/kineto-h100, fp16 autocast, batch 64, channels_last) the
// convolutions' forward kernels take 1.81 ms where the table gives 1.47, their backward (the data
// and the weight gradients) 4.39 ms where it gives 2.33. A convolution on the tensor cores is
// priced at that share of the table's efficiency: 1.47 / 1.81 = 0.81 forward, 2.33 / 4.39 = 0.53
// backward (a 2D convolution at 0.65 and 0.40 of the peak). Checked against
// NVIDIA's published ResNet-50 throughputs on the A100 and the V100 (docs/zoo.md), which were not
// used to set them.
// The tensor cores' kernels work on NHWC activations (NVIDIA's Deep Learning Performance Guide,
// "Tensor Core requirements" for convolutions): on NCHW tensors, PyTorch's default memory format,
// cuDNN transposes what a convolution reads and writes into NHWC and back, around its kernels. A
// tensor-core convolution on NCHW activations is priced with those transposes: its bytes read
// and written twice more (once each way), streamed as elementwise kernels are (add's 0.90 of the
// bandwidth), one kernel each way. channels_last (`--channels-last`, torch.channels_last) needs
// none; the CUDA cores' kernels (fp32) read NCHW as it is.
constexpr double kTensorCoreConvolutionForward = 0.81;
constexpr double kTensorCoreConvolutionBackward = 0.53;
constexpr Efficiency kFusedAttentionForward{0.35, 0.70};
constexpr Efficiency kFusedAttentionBackward{0.30, 0.70};

// Note [Unaligned GEMMs]
// ~~~~~~~~~~~~~~~~~~~~~~
// NVIDIA's rule (Matrix Multiplication Background User's Guide, "Tensor Core Requirements"):
// tensor cores are used most efficiently when a GEMM's dimensions are multiples of 16 bytes —
// 8 elements in FP16 and BF16, 4 in TF32 — (on the A100, of 128 bytes); since cuBLAS 11 the
// tensor cores are used regardless, but an unaligned GEMM runs kernels that read their operands in
// narrower loads: CUTLASS's kernels carry the width in their names (align8 for 16 bytes of 16-bit
// elements, align4, align2, align1), and a leading dimension of 50,257 bf16 elements leaves only
// align1 (2 bytes a load). For a linear layer y = x·Wᵀ (x [M, in], W [out, in], y [M, out], all
// row-major) the leading dimensions are `in` and `out` in forward and in both backward GEMMs (dX =
// dY·W, dW = dYᵀ·x): the rows M (the batch's tokens) are never one, so an odd batch costs nothing.
// The zoo prices such a layer at its aligned efficiency times the load width over 16 bytes —
// the largest power of two dividing both `in` and `out`, in bytes, capped at 16 — on the premise
// that the narrow kernels are bound by their load instructions, which grow as the width shrinks:
// GPT-2's LM head (in 768, out 50,257) in bf16 at 2/16 of 0.75 forward and 0.70 backward, 9.4% and
// 8.8% of the BF16 peak. The H100 profile of Hugging Face's GPT-2 (traces/kineto-h100) ran those
// three GEMMs in cutlass_75 "align1" kernels at 9.7% (forward) and 13.5% and 15.0% (backward) of
// the peak: the rule is that profile's within a factor of 1.7, not fitted to it. fp32 runs on the
// CUDA cores, which have no such rule, and is priced as before; convolutions (cuDNN pads their
// channels) and the attention products are left as they are.
double load_share(std::int64_t in_features, std::int64_t out_features, Precision precision) {
  constexpr std::int64_t kVectorBytes = 16;
  std::int64_t item = 0;
  switch (precision) {
    case Precision::kFp32:
      return 1.0;
    case Precision::kTf32:
      item = 4;  // float32 operands
      break;
    case Precision::kBf16:
    case Precision::kFp16:
      item = 2;
      break;
  }
  std::int64_t width = item;  // bytes a load reads: the elements dividing both, in bytes
  while (width < kVectorBytes && in_features % (2 * width / item) == 0 &&
         out_features % (2 * width / item) == 0) {
    width *= 2;
  }
  return static_cast<double>(width) / static_cast<double>(kVectorBytes);
}
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

// Note [Generic ops' kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The zoo's ops without a layer of their own (core/layer.hpp's kGeneric) run kernels of kinds the
// table already prices. A cast, pow, tanh, mul, SiLU, the rotary embedding's products and
// repeat_kv's broadcast copy read each input element once and write each output element once:
// PyTorch's elementwise (TensorIterator) kernels, which stream at the bandwidth ReLU and add reach
// (0.90 of it, BabelStream's figure in Note [Cost model calibration]); the H100 profile of GPT-2
// small (traces/kineto-h100) ran its unfused GELU's pow, tanh and products and its casts at 0.88.
// RMSNorm reads its input twice, for the mean square and the scaling, as layer norm does. Any
// other generic op keeps the generic row.
constexpr std::array<std::pair<std::string_view, sim::Layer>, 8> kGenericKernels{{
    {"cast", sim::Layer::kAdd},
    {"pow", sim::Layer::kAdd},
    {"tanh", sim::Layer::kAdd},
    {"mul", sim::Layer::kAdd},
    {"silu", sim::Layer::kAdd},
    {"rotary_embedding", sim::Layer::kAdd},
    {"repeat_kv", sim::Layer::kAdd},
    {"rms_norm", sim::Layer::kLayerNorm},
}};

// The layer whose row prices `layer`'s kernels.
sim::Layer priced_as(const sim::LayerType& layer) {
  if (!layer.generic()) return layer.kind();
  for (const auto& [name, like] : kGenericKernels) {
    if (layer.name() == name) return like;
  }
  return sim::Layer::kGeneric;
}

}  // namespace

CostModel::CostModel(const Device& device, Precision precision, bool channels_last)
    : device_(device),
      precision_(precision),
      channels_last_(channels_last),
      matrix_flops_per_s_(matrix_flops_per_s(device, precision)) {
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

Efficiency CostModel::tensor_core_convolution(sim::Layer layer, sim::Phase phase) {
  Efficiency e = efficiency(layer, phase);
  e.compute *= phase == sim::Phase::kBackward ? kTensorCoreConvolutionBackward
                                              : kTensorCoreConvolutionForward;
  return e;
}

Efficiency CostModel::fused_attention(sim::Phase phase) {
  return phase == sim::Phase::kBackward ? kFusedAttentionBackward : kFusedAttentionForward;
}

double CostModel::alignment(std::int64_t in_features, std::int64_t out_features,
                            Precision precision) {
  return load_share(in_features, out_features, precision);
}

sim::Nanoseconds CostModel::duration(const sim::Op& op, bool memory_optimal) const {
  return scaled_duration(op, memory_optimal, 1.0);
}

sim::Nanoseconds CostModel::scaled_duration(const sim::Op& op, bool memory_optimal,
                                            double compute_share) const {
  const bool fused_attention_op = op.layer.generic() && op.layer.name() == kFusedAttentionOp;
  const sim::LayerFamily family = op.layer.rule().family;
  const bool convolution = family == sim::LayerFamily::kConvolution;
  const bool tensor_cores = precision_ != Precision::kFp32;
  Efficiency e = fused_attention_op            ? fused_attention(op.phase)
                 : convolution && tensor_cores ? tensor_core_convolution(op.layer.kind(), op.phase)
                                               : efficiency(priced_as(op.layer), op.phase);
  if (memory_optimal) e.compute /= kMemoryOptimalSlowdown;
  e.compute *= compute_share;
  const double flops = op.flops.value_or(0.0);
  const double bytes = static_cast<double>(op.bytes_moved.value_or(0));
  const bool matrix = fused_attention_op || convolution || family == sim::LayerFamily::kMatmul;
  const double peak = matrix ? matrix_flops_per_s_ : device_.peak_flops_per_s;
  const double compute_s = flops / (peak * e.compute);
  const double memory_s = bytes / (device_.memory_bytes_per_s * e.memory);
  sim::Nanoseconds ns = kKernelOverheadNs + static_cast<sim::Nanoseconds>(
                                                std::llround(std::max(compute_s, memory_s) * 1e9));
  if (convolution && tensor_cores && !channels_last_) {
    // Into NHWC and back (Note [Tensor-core convolutions]).
    const double stream =
        device_.memory_bytes_per_s * efficiency(sim::Layer::kAdd, op.phase).memory;
    ns += 2 * kKernelOverheadNs +
          static_cast<sim::Nanoseconds>(std::llround(2.0 * bytes / stream * 1e9));
  }
  return ns;
}

void CostModel::apply(sim::Workload& workload) const {
  for (sim::Op& op : workload.ops) {
    double share = 1.0;
    if (op.layer == sim::Layer::kLinear) {
      // The weight [out, in] is the forward op's second input (a backward op's forward names it).
      const sim::Op& forward =
          op.phase == sim::Phase::kForward ? op : workload.op(op.differentiates);
      const std::vector<std::int64_t>& weight = workload.tensor(forward.inputs.at(1)).shape;
      if (weight.size() == 2) share = alignment(weight[1], weight[0], precision_);
    }
    op.duration_ns = scaled_duration(op, false, share);
    for (sim::Algorithm& a : op.algorithms)
      a.duration_ns = scaled_duration(op, a.name == "memory_optimal", share);
  }
}

}  // namespace memplan::zoo
