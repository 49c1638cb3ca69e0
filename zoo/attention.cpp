#include "zoo/attention.hpp"

namespace memplan::zoo {

std::string_view attention_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::kSdpa ? "sdpa" : "eager";
}

AttentionKernel default_attention(Precision precision) {
  const bool sixteen_bit = precision == Precision::kBf16 || precision == Precision::kFp16;
  return sixteen_bit ? AttentionKernel::kSdpa : AttentionKernel::kEager;
}

Value attention_core(Network& net, const std::string& core, const Value& qkv, std::int64_t heads,
                     AttentionKind kind) {
  if (kind.kernel == AttentionKernel::kSdpa) {
    return net.scaled_dot_product_attention(core + ".sdpa", qkv, heads, kind.causal, kind.dropout);
  }
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
