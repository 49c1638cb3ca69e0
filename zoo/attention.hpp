#pragma once
// Self-attention as the zoo's transformers share it (GPT in transformer.cpp, llama.cpp,
// vit.cpp): the eager, unfused path — scores Q·Kᵀ/√d, softmax, P·V — over one fused QKV buffer,
// as Hugging Face's eager attention and torch 1.13's nn.MultiheadAttention compute it, so backward
// keeps the probabilities [B, heads, S, S]. (PyTorch 2's fused scaled_dot_product_attention
// kernels keep q, k, v, their output and a log-sum-exp per row instead; they are not modeled.)
#include <cstdint>
#include <string>

#include "zoo/network.hpp"

namespace memplan::zoo {

/// How an attention runs: causal (the decoders) or not (ViT's encoder), with dropout on its
/// probabilities (GPT-2's attn_pdrop) or without (LLaMA's and ViT's dropout of 0 runs nothing).
struct AttentionKind {
  bool causal = true;
  bool dropout = false;
};

/// From a fused QKV buffer [B, S, 3H] to the heads' merged context [B, S, H]: the ops
/// "<core>.scores", "<core>.softmax", "<core>.attn_dropout" (with dropout) and "<core>.context".
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
