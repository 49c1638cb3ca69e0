// A GPT-style decoder (Radford et al. 2019, GPT-2) as Hugging Face's GPT2LMHeadModel builds it
// without fused attention kernels: token + position embeddings, pre-norm blocks (layer-norm,
// fused QKV projection, causal softmax attention with dropout, output projection, dropout,
// residual; layer-norm, 4H MLP with GELU, dropout, residual), a final layer-norm and an LM head
// tied to the token embedding; loss is cross-entropy over the vocabulary at every position.
// The defaults (12 layers, 768 hidden, 12 heads, 1024 tokens, 50257 words) are GPT-2 small.
#include <fmt/core.h>

#include "zoo/models.hpp"

namespace memplan::zoo {

void build_transformer(Network& net, const ModelOptions& options) {
  const TransformerOptions& o = options.transformer;
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
    const Value qkv = net.linear(p + ".attn.c_attn", a, 3 * o.hidden);
    Value scores = net.attention_scores(p + ".attn.scores", qkv, o.heads);
    scores = net.softmax(p + ".attn.softmax", scores);
    scores = net.dropout(p + ".attn.attn_dropout", scores);
    a = net.attention_context(p + ".attn.context", scores, qkv);
    a = net.linear(p + ".attn.c_proj", a, o.hidden);
    a = net.dropout(p + ".attn.resid_dropout", a);
    h = net.add(p + ".residual1", a, h, false);
    Value m = net.layer_norm(p + ".ln_2", h);
    m = net.linear(p + ".mlp.c_fc", m, 4 * o.hidden);
    m = net.gelu(p + ".mlp.act", m);
    m = net.linear(p + ".mlp.c_proj", m, o.hidden);
    m = net.dropout(p + ".mlp.dropout", m);
    h = net.add(p + ".residual2", m, h, false);
  }
  h = net.layer_norm("ln_f", h);
  const Value logits = net.linear_with("lm_head", h, wte, false);
  net.softmax_cross_entropy("loss", logits, labels);
}

}  // namespace memplan::zoo
