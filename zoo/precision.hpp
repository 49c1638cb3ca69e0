#pragma once
// Precision: the arithmetic a modeled training step runs in (`memplan zoo --precision`), which
// decides the dtype of every tensor the zoo's networks write (zoo/network.cpp) and the rate each
// op is priced at (zoo/cost_model.cpp).
//
// Note [Training precision]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The four precisions are PyTorch's ways of training on a GPU:
// - fp32: float32 tensors; matmuls and convolutions at the device's FP32 rate
//   (torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 both False;
//   PyTorch's default since 1.12 keeps matmuls there but lets cuDNN's convolutions use TF32).
// - tf32: both flags True. Tensors stay float32 (the step's memory is fp32's); matmuls and
//   convolutions run on the tensor cores at the TF32 rate.
// - bf16, fp16: the forward pass and the loss under torch.autocast(device_type="cuda", dtype=...),
//   backward and the optimizer outside it; parameters, their gradients and the optimizer's state
//   float32 (mixed precision as users run it; fp16 with a torch.amp.GradScaler). Autocast's op
//   reference (torch.amp docs, "Autocast Op Reference"; aten/src/ATen/autocast_mode.h) decides the
//   dtype an op runs in and writes:
//   - lower-precision ops (conv1d/2d/3d, linear, addmm, matmul, mm, bmm, baddbmm,
//     scaled_dot_product_attention; here conv, linear, the attention's two products and the fused
//     attention) cast each floating input to the low dtype and write the low dtype;
//   - float32 ops (layer_norm, group_norm, cross_entropy, nll_loss, exp, log, pow, norm, ...; here
//     layer-norm, the softmax cross-entropy, and RMSNorm, which Hugging Face's LlamaRMSNorm upcasts
//     itself) cast each floating input to float32 and write float32; softmax, log_softmax, sum,
//     cumsum (fp32_set_opt_dtype) read their input as it is and write float32;
//   - cat, stack (promote) cast the narrower inputs to the widest (ViT's class-token cat);
//   - any other op runs in its inputs' dtype, the widest where they differ, by PyTorch's type
//     promotion (relu, gelu, silu, add, mul, dropout, pooling, an embedding lookup in its float32
//     table); cuDNN's batch norm writes its input's dtype beside float32 weights and statistics; an
//     in-place op keeps the dtype of the tensor it overwrites.
//   A cast is an op of its own ("cast", a generic op: Note [Generic zoo ops]) writing a new tensor
//   that the op reads and saves for backward: autocast casts before autograd records, so that a
//   lower-precision op saves low-precision inputs. A trainable parameter's cast is cached (only
//   leaves that need a gradient are): made once per forward at its first lower-precision use,
//   held until the autocast region exits and saved by the ops that read it, it is a low-precision
//   copy of the weight, `NAME.to_bf16` (`.to_fp16`). Any other cast is made for each op that reads
//   it: `OP.SOURCE.to_bf16`, `OP.SOURCE.to_fp32`. In backward every op writes each input's gradient
//   in that input's dtype — autograd's engine casts a gradient that arrives in another dtype, as
//   the gradient an add of a float32 and a bf16 tensor hands its bf16 input
//   (`ADD_bwd.SOURCE.to_bf16`) — and a cast's backward converts the gradient back: a weight's bf16
//   gradient becomes the float32 gradient the optimizer reads. With fp16, GradScaler's unscale_
//   reads and rewrites every gradient before the update (counted in the update op's bytes).
// Time (zoo/cost_model.cpp): convolutions, linear layers and the attention products at the
// device's matrix rate for the precision — the FP32 rate (NVIDIA's CUDA cores, AMD's matrix cores),
// TF32 tensor cores, or dense FP16/BF16 tensor cores — every other op at the FP32 vector rate or
// its memory bound, through the same roofline and efficiencies. A device without the precision's
// unit (the V100 has no TF32 or BF16 tensor cores) refuses it.
#include <cstdint>
#include <string_view>

namespace memplan::zoo {

enum class Precision : std::uint8_t { kFp32, kTf32, kBf16, kFp16 };

/// "fp32", "tf32", "bf16", "fp16": the name `--precision` takes.
std::string_view precision_name(Precision precision);

/// The dtype autocast casts to ("bfloat16", "float16"), or empty for fp32 and tf32 (no autocast).
std::string_view autocast_dtype(Precision precision);

}  // namespace memplan::zoo
