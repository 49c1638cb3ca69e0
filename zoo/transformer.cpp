// A GPT-style decoder (Radford et al. 2019, GPT-2) as Hugging Face's GPT2LMHeadModel builds it:
// token + position embeddings, pre-norm blocks (layer-norm, fused QKV projection, causal softmax
// attention with dropout, output projection, dropout, residual; layer-norm, MLP with GELU,
// dropout, residual), a final layer-norm and an LM head tied to the token embedding; loss is
// cross-entropy over the vocabulary at every position.
// The defaults (12 layers, 768 hidden, 12 heads, 1024 tokens, 50257 words, an MLP of 4·hidden:
// GPT2Config's n_inner) are GPT-2 small. The attention is eager or fused (attn_implementation
// "eager" or "sdpa": Note [Fused attention] in zoo/attention.hpp), the GELU one fused kernel or
// Hugging Face's default gelu_new as it computes it (Note [Unfused GELU] in zoo/network.cpp).
#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/attention.hpp"
#include "zoo/models.hpp"

namespace memplan::zoo {

TransformerShape gpt_shape(const TransformerOptions& options) {
  if (options.kv_heads) {
    throw sim::InputError("--kv-heads",
                          "gpt has no grouped-query attention (its keys and values have --heads)");
  }
  TransformerShape t;
  t.layers = options.layers.value_or(12);
  t.hidden = options.hidden.value_or(768);
  t.heads = options.heads.value_or(12);
  t.sequence = options.sequence.value_or(1024);
  t.vocab = options.vocab.value_or(50257);
  t.intermediate = options.intermediate.value_or(4 * t.hidden);
  t.kv_heads = t.heads;
  return t;
}

void build_transformer(Network& net, const ModelOptions& options) {
  const TransformerShape o = gpt_shape(options.transformer);
  const AttentionKernel attention = attention_kernel(options);
  const bool gelu_new = options.activation == GptActivation::kGeluNew;
  const Value tokens = net.int_input("tokens", {o.sequence});
  const Value positions = net.int_input("positions", {o.sequence});
  const Value labels = net.int_input("labels", {o.sequence});
  const Value wte = net.parameter("wte", {o.vocab, o.hidden});
  const Value wpe = net.parameter("wpe", {o.sequence, o.hidden});
  Value h = net.add("embed", net.embedding("wte.lookup", tokens, wte),
                    net.embedding("wpe.lookup", positions, wpe), false);
  h = net.dropout("drop", h);
  for (std::int64_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("h.{}", l);
    Value a = net.layer_norm(p + ".ln_1", h);
    a = self_attention(net, {p + ".attn.c_attn", p + ".attn", p + ".attn.c_proj"}, a, o.heads,
                       {.causal = true, .dropout = true, .kernel = attention});
    a = net.dropout(p + ".attn.resid_dropout", a);
    h = net.add(p + ".residual1", a, h, false);
    Value m = net.layer_norm(p + ".ln_2", h);
    m = net.linear(p + ".mlp.c_fc", m, o.intermediate);
    m = gelu_new ? net.gelu_new(p + ".mlp.act", m) : net.gelu(p + ".mlp.act", m);
    m = net.linear(p + ".mlp.c_proj", m, o.hidden);
    m = net.dropout(p + ".mlp.dropout", m);
    h = net.add(p + ".residual2", m, h, false);
  }
  h = net.layer_norm("ln_f", h);
  const Value logits = net.linear_with("lm_head", h, wte, false);
  net.softmax_cross_entropy("loss", logits, labels);
}

}  // namespace memplan::zoo
