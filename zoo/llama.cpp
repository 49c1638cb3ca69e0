// A LLaMA decoder (Touvron et al. 2023, LLaMA and Llama 2) as Hugging Face's LlamaForCausalLM
// builds it (transformers' modeling_llama.py with attn_implementation "eager", or "sdpa": Note
// [Fused attention] in zoo/attention.hpp; no biases, no dropout, an LM head not tied to the
// embedding): a token embedding; pre-norm blocks — RMSNorm,
// the q, k and v projections, the rotary position embedding of q and k, causal softmax attention,
// the output projection, residual; RMSNorm, the SwiGLU MLP down(silu(gate(x)) · up(x)),
// residual; a final RMSNorm, the LM head and cross-entropy at every position.
// One departure, for the attention layers' operands (one QKV buffer, traces/FORMAT.md): the q, k
// and v projections are one linear layer of their stacked weights, whose output the rotary
// embedding rotates in place (as flash-attn's apply_rotary_emb_qkv_ does). Parameters, flops and
// saved bytes are those of Hugging Face's three projections and out-of-place rotation: the
// attention saves their q_embed, k_embed and v as it saves the one buffer here.
// Grouped-query attention (kv_heads fewer than heads) projects keys and values to kv_heads heads
// and repeats them (Network::repeat_kv) into the buffer the attention reads.
// The defaults are a small LLaMA: 4 layers, 512 hidden, 8 heads, 512 tokens, LLaMA's 32000-word
// vocabulary, an MLP by Meta's rule (1536), 46,404,096 parameters. Other shapes, by the flags:
//   LLaMA-2-7B:     --layers 32 --hidden 4096 --heads 32 --seq 4096 (MLP 11008 by the rule),
//                   6,738,415,616 parameters;
//   TinyLlama-1.1B: --layers 22 --hidden 2048 --heads 32 --kv-heads 4 --seq 2048;
//   Llama-3-8B:     --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336
//                   --vocab 128256 --seq 8192.
#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/attention.hpp"
#include "zoo/models.hpp"

namespace memplan::zoo {

std::int64_t llama_intermediate(std::int64_t hidden) {
  constexpr std::int64_t kMultipleOf = 256;
  const std::int64_t two_thirds = 2 * (4 * hidden) / 3;
  return (two_thirds + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

TransformerShape llama_shape(const TransformerOptions& options) {
  TransformerShape t;
  t.layers = options.layers.value_or(4);
  t.hidden = options.hidden.value_or(512);
  t.heads = options.heads.value_or(8);
  t.sequence = options.sequence.value_or(512);
  t.vocab = options.vocab.value_or(32000);
  t.intermediate = options.intermediate.value_or(llama_intermediate(t.hidden));
  t.kv_heads = options.kv_heads.value_or(t.heads);
  return t;
}

void build_llama(Network& net, const ModelOptions& options) {
  const TransformerShape o = llama_shape(options.transformer);
  const std::int64_t head_dim = o.hidden / o.heads;
  if (head_dim % 2 != 0) {
    throw sim::InputError("--heads", fmt::format("heads {} wide (hidden {} / {} heads) cannot be "
                                                 "rotated in pairs: the width must be even",
                                                 head_dim, o.hidden, o.heads));
  }
  const Value tokens = net.int_input("input_ids", {o.sequence});
  const Value labels = net.int_input("labels", {o.sequence});
  const Value embed = net.parameter("model.embed_tokens.weight", {o.vocab, o.hidden});
  Value h = net.embedding("model.embed_tokens", tokens, embed);
  const RotaryTables tables = net.rotary_tables("model.rotary_emb", o.sequence, head_dim);
  for (std::int64_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    Value a = net.rms_norm(p + ".input_layernorm", h);
    Value qkv =
        net.linear(p + ".self_attn.qkv_proj", a, (o.heads + 2 * o.kv_heads) * head_dim, false);
    qkv = net.rotary_embedding(p + ".self_attn.rotary", qkv, tables, o.heads, o.kv_heads);
    if (o.kv_heads != o.heads)
      qkv = net.repeat_kv(p + ".self_attn.repeat_kv", qkv, o.heads, o.kv_heads);
    a = attention_core(net, p + ".self_attn", qkv, o.heads,
                       {.causal = true, .dropout = false, .kernel = attention_kernel(options)});
    a = net.linear(p + ".self_attn.o_proj", a, o.hidden, false);
    h = net.add(p + ".residual1", h, a, false);
    const Value m = net.rms_norm(p + ".post_attention_layernorm", h);
    Value gate = net.linear(p + ".mlp.gate_proj", m, o.intermediate, false);
    gate = net.silu(p + ".mlp.act_fn", gate);
    const Value up = net.linear(p + ".mlp.up_proj", m, o.intermediate, false);
    const Value product = net.mul(p + ".mlp.mul", gate, up);
    h = net.add(p + ".residual2", h, net.linear(p + ".mlp.down_proj", product, o.hidden, false),
                false);
  }
  h = net.rms_norm("model.norm", h);
  const Value logits = net.linear("lm_head", h, o.vocab, false);
  net.softmax_cross_entropy("loss", logits, labels);
}

}  // namespace memplan::zoo
