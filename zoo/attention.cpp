#include "zoo/attention.hpp"

namespace memplan::zoo {

Value attention_core(Network& net, const std::string& core, const Value& qkv, std::int64_t heads,
                     AttentionKind kind) {
  Value probs = net.attention_scores(core + ".scores", qkv, heads, kind.causal);
  probs = net.softmax(core + ".softmax", probs);
  if (kind.dropout) probs = net.dropout(core + ".attn_dropout", probs);
  return net.attention_context(core + ".context", probs, qkv);
}

Value self_attention(Network& net, const SelfAttentionNames& names, const Value& x,
                     std::int64_t heads, AttentionKind kind) {
  const std::int64_t hidden = x.shape.back();
  const Value qkv = net.linear(names.in_proj, x, 3 * hidden);
  const Value context = attention_core(net, names.core, qkv, heads, kind);
  return net.linear(names.out_proj, context, hidden);
}

}  // namespace memplan::zoo
