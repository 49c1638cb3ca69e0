// ViT-B/16 (Dosovitskiy et al. 2021) as torchvision's vit_b_16 builds it: a 16x16 convolution of
// stride 16 (with bias) embeds the patches, a learned class token goes in front of them and a
// learned position embedding is added (Network::patch_tokens); 12 pre-norm encoder blocks
// (layer-norm, 12-head self-attention with biases, residual; layer-norm, MLP of 3072 with GELU,
// residual); a final layer-norm; the head (1000 classes) on the class token. torchvision's dropout
// is 0, so none runs. The attention is GPT's (zoo/attention.hpp: eager, or the fused
// scaled_dot_product_attention PyTorch 2's nn.MultiheadAttention calls), without the causal mask.
// 224x224 by default (14x14 patches, 197 tokens); another input divisible by 16 sizes the position
// embedding to its patch grid, as VisionTransformer(image_size=...) does.
#include <fmt/core.h>

#include "core/input_error.hpp"
#include "zoo/attention.hpp"
#include "zoo/models.hpp"

namespace memplan::zoo {

void build_vit_b16(Network& net, const ModelOptions& options) {
  constexpr std::int64_t kPatch = 16;
  constexpr std::int64_t kLayers = 12;
  constexpr std::int64_t kHidden = 768;
  constexpr std::int64_t kHeads = 12;
  constexpr std::int64_t kMlp = 3072;
  const std::int64_t height = options.input[0];
  const std::int64_t width = options.input[1];
  if (height % kPatch != 0 || width % kPatch != 0) {
    throw sim::InputError("--input", fmt::format("vit_b16 takes an input divisible by its {}x{} "
                                                 "patches, got {}x{}",
                                                 kPatch, kPatch, height, width));
  }
  const Value x = net.input("image", {3, height, width});
  const Value labels = net.int_input("labels", {});
  const Value patches =
      net.conv("conv_proj", x, {kHidden, {kPatch, kPatch}, {kPatch, kPatch}, {}, 1, true});
  const std::int64_t tokens = 1 + (height / kPatch) * (width / kPatch);
  const Value class_token = net.parameter("class_token", {1, 1, kHidden});
  const Value positions = net.parameter("encoder.pos_embedding", {1, tokens, kHidden});
  Value h = net.patch_tokens("tokens", patches, class_token, positions);
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("encoder.layers.encoder_layer_{}", l);
    Value a = net.layer_norm(p + ".ln_1", h);
    a = self_attention(
        net, {p + ".self_attention.in_proj", p + ".self_attention", p + ".self_attention.out_proj"},
        a, kHeads, {.causal = false, .dropout = false, .kernel = attention_kernel(options)});
    h = net.add(p + ".residual1", a, h, false);
    Value m = net.layer_norm(p + ".ln_2", h);
    m = net.linear(p + ".mlp.0", m, kMlp);
    m = net.gelu(p + ".mlp.1", m);
    m = net.linear(p + ".mlp.3", m, kHidden);
    h = net.add(p + ".residual2", h, m, false);
  }
  h = net.layer_norm("encoder.ln", h);
  const Value logits = net.linear("heads.head", Network::first_token(h), 1000);
  net.softmax_cross_entropy("loss", logits, labels);
}

}  // namespace memplan::zoo
