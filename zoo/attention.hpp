#pragma once
// Self-attention as the zoo's transformers share it (GPT in transformer.cpp, llama.cpp,
// vit.cpp), over one fused QKV buffer, in one of two kernels (Note [Fused attention]): the eager,
// unfused path — scores Q·Kᵀ/√d, softmax, P·V — as Hugging Face's eager attention and torch
// 1.13's nn.MultiheadAttention compute it, whose backward keeps the probabilities
// [B, heads, S, S]; or PyTorch 2's fused scaled_dot_product_attention (the FlashAttention-2
// kernel), which keeps q, k, v, its output and a log-sum-exp per row, and recomputes the scores
// in its backward.
//
// Note [Fused attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// `--attention sdpa` (Python: attention="sdpa") models the attention's core as one op,
// `scaled_dot_product_attention` (a generic op: Note [Generic zoo ops]), as PyTorch runs
// F.scaled_dot_product_attention on a GPU in 16-bit — the flash backend, FlashAttention-2 (Dao
// 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning";
// PyTorch's aten::_scaled_dot_product_flash_attention, what Hugging Face's default
// attn_implementation="sdpa" and torchvision's nn.MultiheadAttention(need_weights=False) call):
// - Forward reads the QKV buffer [B, S, 3H] (q, k and v are views of it, the [B, S, heads, d]
//   layout the kernel takes) and writes the context [B, S, H] in the QKV buffer's dtype and the
//   log-sum-exp of each query row's scores, float32 [B, heads, S] (softmax_lse); with dropout
//   (GPT-2's attn_pdrop) also the Philox generator's seed and offset, two int64 (16 bytes), from
//   which backward regenerates the dropout mask. No S×S tensor is ever written.
// - Backward reads the output's gradient, the QKV buffer, the output, the log-sum-exp and the
//   generator state (what autograd saves: query, key, value, output, logsumexp, philox_seed,
//   philox_offset) and writes the QKV buffer's gradient, recomputing the scores block by block.
//   Its workspace is FlashAttention-2's: a float32 accumulator for dq [B, heads, S₁₂₈, d] and the
//   float32 row sums of dO·O [B, heads, S₁₂₈] (S₁₂₈: S rounded up to a multiple of 128;
//   flash_api.cpp's dq_accum and softmax_d).
// - Flops: forward 4·B·S²·H (Q·Kᵀ and P·V, 2·B·heads·S²·d each), half of it with the causal mask
//   (the blocks above the diagonal are skipped); backward 2.5 times forward (five matmuls to the
//   forward's two: the scores recomputed, dV, dP, dQ, dK; FlashAttention-2 §3.1.2 and its
//   benchmarks' accounting). Both at the device's matrix rate for the precision
//   (zoo/cost_model.cpp, with efficiencies of their own).
// - The output is the tensor the output projection reads (flash writes it [B, S, heads, d]:
//   the transpose and reshape Hugging Face and nn.MultiheadAttention apply are views), so saving
//   it adds nothing the projection does not already keep.
// Per layer, the saved bytes drop from the eager path's probabilities (and scores, mask) of
// heads·B·S² elements each to 4·heads·B·S bytes of log-sum-exp (+16 with dropout): the QKV
// buffer and the context are saved either way (tests/zoo/llama_vit_test.cpp works a layer out).
// In fp32 and tf32 PyTorch runs the memory-efficient kernel (xformers' cutlass kernel: flash
// takes 16-bit only), which saves the same tensors with the log-sum-exp's rows padded to a
// multiple of 32 and needs no such workspace; the zoo models that when sdpa is asked for there.
// The default (`--attention` not given) is what a user training in that precision gets from
// today's libraries: sdpa for bf16 and fp16 (Hugging Face's and torchvision's modules call the
// fused kernels under PyTorch 2), eager for fp32 and tf32 — the step the zoo wrote before the
// option, byte for byte, which the host and CUDA backends can run (`scaled_dot_product_attention`
// has no backend kernel; a step with it is modeled only).
#include <cstdint>
#include <string>
#include <string_view>

#include "zoo/network.hpp"

namespace memplan::zoo {

/// The kernels an attention's core runs as (`memplan zoo --attention`).
enum class AttentionKernel : std::uint8_t {
  kEager,  // scores, softmax, dropout, P·V: four kernels, the S×S probabilities saved
  kSdpa,   // one fused scaled_dot_product_attention (FlashAttention-2): no S×S tensor
};

/// "eager" or "sdpa": the name `--attention` takes.
std::string_view attention_name(AttentionKernel kernel);
/// The kernel a step in `precision` gets when none is asked for (Note [Fused attention]): sdpa
/// for bf16 and fp16, eager for fp32 and tf32.
AttentionKernel default_attention(Precision precision);

/// How an attention runs: causal (the decoders) or not (ViT's encoder), with dropout on its
/// probabilities (GPT-2's attn_pdrop) or without (LLaMA's and ViT's dropout of 0 runs nothing),
/// eager or fused.
struct AttentionKind {
  bool causal = true;
  bool dropout = false;
  AttentionKernel kernel = AttentionKernel::kEager;
};

/// From a fused QKV buffer [B, S, 3H] to the heads' merged context [B, S, H]: eager, the ops
/// "<core>.scores", "<core>.softmax", "<core>.attn_dropout" (with dropout) and "<core>.context";
/// fused, the one op "<core>.sdpa".
Value attention_core(Network& net, const std::string& core, const Value& qkv, std::int64_t heads,
                     AttentionKind kind);

/// The module names of a self-attention with one input projection for Q, K and V.
struct SelfAttentionNames {
  std::string in_proj;   // GPT-2's c_attn, nn.MultiheadAttention's in_proj
  std::string core;      // attention_core's prefix
  std::string out_proj;  // GPT-2's c_proj, nn.MultiheadAttention's out_proj
};

/// The input projection to QKV (with bias), attention_core, the output projection (with bias):
/// GPT-2's and ViT's self-attention.
Value self_attention(Network& net, const SelfAttentionNames& names, const Value& x,
                     std::int64_t heads, AttentionKind kind);

}  // namespace memplan::zoo
