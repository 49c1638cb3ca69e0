// LLaMA (zoo/llama.cpp) and ViT-B/16 (zoo/vit.cpp): their published parameter counts, the ops of
// one block and its saved bytes counted here by hand from the reference code (Hugging Face's
// modeling_llama.py, torchvision's vision_transformer.py) and autograd's rules (Note [Saved
// tensors] in zoo/network.hpp), and what sets their attention apart.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/zoo/zoo_test_support.hpp"
#include "zoo/saved_activations.hpp"
#include "zoo/zoo.hpp"

using memplan::sim::Phase;
using memplan::test::build;
using memplan::test::op_named;
namespace zoo = memplan::zoo;
namespace sim = memplan::sim;

namespace {

constexpr std::int64_t kFloatBytes = 4;
constexpr std::int64_t kInt64Bytes = 8;

zoo::BuiltModel build_llama(const zoo::TransformerOptions& shape, std::int64_t batch = 1) {
  zoo::ModelOptions options;
  options.batch = batch;
  options.transformer = shape;
  return zoo::build_model(*zoo::find_model("llama"), options);
}

/// LLaMA's trainable parameters from its architecture: per layer the q and o projections (h²
/// each), the k and v projections (h × kv_heads·h/heads each), the SwiGLU MLP's gate, up and down
/// projections (3·h·i) and two RMSNorm weights (2·h); the token embedding and the untied LM head
/// (2·vocab·h); the final RMSNorm (h). No biases.
std::int64_t llama_parameters(std::int64_t layers, std::int64_t h, std::int64_t heads,
                              std::int64_t kv_heads, std::int64_t i, std::int64_t vocab) {
  const std::int64_t kv = kv_heads * (h / heads);
  return layers * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + 2 * vocab * h + h;
}

/// The forward ops of one block, in issue order, as "layer name" strings.
std::vector<std::string> forward_layers(const sim::Workload& w, std::string_view block) {
  std::vector<std::string> layers;
  for (const sim::Op& op : w.ops) {
    if (op.phase == Phase::kForward && op.name.starts_with(block)) layers.push_back(op.layer.str());
  }
  return layers;
}

std::size_t backward_ops(const sim::Workload& w, std::string_view block) {
  std::size_t n = 0;
  for (const sim::Op& op : w.ops) {
    n += op.phase == Phase::kBackward && op.differentiates != sim::kNoOp &&
                 op.name.starts_with(block)
             ? 1
             : 0;
  }
  return n;
}

std::size_t accumulations(const sim::Workload& w, std::string_view block) {
  std::size_t n = 0;
  for (const sim::Op& op : w.ops) {
    n += op.layer == sim::Layer::kGradAccumulate && op.name.starts_with(block) ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("LLaMA's parameter counts are the published ones", "[zoo][llama]") {
  // Meta's SwiGLU width: 2/3 of 4·hidden, rounded up to a multiple of 256.
  CHECK(zoo::llama_intermediate(4096) == 11008);  // LLaMA-2-7B
  CHECK(zoo::llama_intermediate(2048) == 5632);   // TinyLlama-1.1B
  CHECK(zoo::llama_intermediate(512) == 1536);    // the zoo's default
  // LLaMA-2-7B (meta-llama/Llama-2-7b-hf: 32 layers, 4096 hidden, 32 heads, MLP 11008, vocab
  // 32000): 6,738,415,616 parameters as published; the formula and the builder agree.
  CHECK(llama_parameters(32, 4096, 32, 32, 11008, 32000) == 6'738'415'616);
  CHECK(
      build_llama({.layers = 32, .hidden = 4096, .heads = 32, .sequence = 4096}).parameter_count ==
      6'738'415'616);
  // Grouped-query attention shrinks the k and v projections: TinyLlama-1.1B (22 layers, 2048
  // hidden, 32 heads, 4 key/value heads, MLP 5632 by the rule) and Llama-3-8B (32 layers, 4096
  // hidden, 32 heads, 8 key/value heads, MLP 14336, vocab 128256).
  CHECK(llama_parameters(22, 2048, 32, 4, 5632, 32000) == 1'100'048'384);
  CHECK(build_llama({.layers = 22, .hidden = 2048, .heads = 32, .sequence = 2048, .kv_heads = 4})
            .parameter_count == 1'100'048'384);
  CHECK(llama_parameters(32, 4096, 32, 8, 14336, 128256) == 8'030'261'248);
  CHECK(build_llama({.layers = 32,
                     .hidden = 4096,
                     .heads = 32,
                     .sequence = 64,
                     .vocab = 128256,
                     .intermediate = 14336,
                     .kv_heads = 8})
            .parameter_count == 8'030'261'248);
  // The default: 4 layers, 512 hidden, 8 heads, MLP 1536, vocab 32000.
  CHECK(build("llama").parameter_count == llama_parameters(4, 512, 8, 8, 1536, 32000));
  CHECK(llama_parameters(4, 512, 8, 8, 1536, 32000) == 46'404'096);
}

TEST_CASE("ViT-B/16's parameter count is torchvision's", "[zoo][vit]") {
  // torchvision's vit_b_16: the patch conv 768x3x16x16 with bias, the class token (768), the
  // position embedding (197 tokens of 768); per layer two layer-norms (weight and bias), the
  // attention's in_proj (3·768 x 768 and its bias) and out_proj (768 x 768 and bias), the MLP
  // (768 → 3072 → 768 with biases); the final layer-norm; the head (768 → 1000 with bias).
  const std::int64_t h = 768;
  const std::int64_t layer = 4 * h + 3 * h * h + 3 * h + h * h + h + 2 * h * 3072 + 3072 + h;
  const std::int64_t count =
      3 * h * 16 * 16 + h + h + 197 * h + 12 * layer + 2 * h + h * 1000 + 1000;
  REQUIRE(count == 86'567'656);  // sum(p.numel()) of torchvision.models.vit_b_16()
  CHECK(build("vit_b16").parameter_count == count);
  CHECK(zoo::find_model("vit-b") == zoo::find_model("vit_b16"));
}

TEST_CASE("a LLaMA block's ops, counted by hand", "[zoo][llama]") {
  // Hugging Face's LlamaDecoderLayer, forward: input_layernorm (RMSNorm), the q/k/v projection
  // (one linear: zoo/llama.cpp), the rotary embedding, attention scores, softmax, context,
  // o_proj, the residual add; post_attention_layernorm, gate_proj, act_fn (SiLU), up_proj, the
  // product of the two, down_proj, the residual add: 15 ops, 16 with repeat_kv under grouped-query
  // attention. Backward: one op for each but the two adds, whose gradient autograd passes
  // through: 13 (14). Gradients summed where a tensor of the block has two readers: the rotated
  // QKV buffer (scores and context; repeat_kv's copy of it under grouped-query attention),
  // residual1 (post_attention_layernorm and residual2), post_attention_layernorm (gate_proj and
  // up_proj) and the block's output (the next block's input_layernorm and residual1): 4. The middle
  // block of three has all four.
  const std::vector<std::string> block{"rms_norm",
                                       "linear",
                                       "rotary_embedding",
                                       "attention_scores",
                                       "softmax",
                                       "attention_context",
                                       "linear",
                                       "add",
                                       "rms_norm",
                                       "linear",
                                       "silu",
                                       "linear",
                                       "mul",
                                       "linear",
                                       "add"};
  const zoo::TransformerOptions small{
      .layers = 3, .hidden = 64, .heads = 4, .sequence = 16, .vocab = 100};
  const sim::Workload w = build_llama(small).workload;
  CHECK(forward_layers(w, "model.layers.1.") == block);
  CHECK(backward_ops(w, "model.layers.1.") == 13);
  CHECK(accumulations(w, "model.layers.1.") == 4);

  zoo::TransformerOptions grouped = small;
  grouped.kv_heads = 2;
  const sim::Workload g = build_llama(grouped).workload;
  std::vector<std::string> with_repeat = block;
  with_repeat.insert(with_repeat.begin() + 3, "repeat_kv");
  CHECK(forward_layers(g, "model.layers.1.") == with_repeat);
  CHECK(backward_ops(g, "model.layers.1.") == 14);
  CHECK(accumulations(g, "model.layers.1.") == 4);
  // The projection writes 4 query heads and 2 key and 2 value heads of 16; repeat_kv widens the
  // keys and values to 4 heads each for the attention.
  CHECK(memplan::test::tensor_named(g, "model.layers.1.self_attn.qkv_proj").shape ==
        zoo::Shape{1, 16, 128});
  CHECK(memplan::test::tensor_named(g, "model.layers.1.self_attn.repeat_kv").shape ==
        zoo::Shape{1, 16, 192});
  // The rotation writes over the projection's output, which nothing else reads.
  const sim::Tensor& rotary = memplan::test::tensor_named(w, "model.layers.1.self_attn.rotary");
  CHECK(w.tensor(rotary.in_place_of).name == "model.layers.1.self_attn.qkv_proj");
}

TEST_CASE("a LLaMA block saves what autograd's formulas say, counted by hand",
          "[zoo][llama][memory]") {
  // Batch b = 2, sequence s = 16, hidden h = 64, a = 4 heads, MLP i = 256 (Meta's rule for 64:
  // 2/3·256 = 170, rounded up to 256). Per block, in floats, each storage once:
  //   the block's input (input_layernorm's x)                                  s·b·h =  2,048
  //   input_layernorm's rstd                                                   s·b   =     32
  //   input_layernorm's output (the q/k/v projection's input)                  s·b·h =  2,048
  //   the rotated QKV buffer (scores' and context's operand)                 3·s·b·h =  6,144
  //   the probabilities (softmax's output, context's operand)                a·b·s² =  2,048
  //   the context (o_proj's input)                                             s·b·h =  2,048
  //   residual1 (post_attention_layernorm's x) and its rstd             s·b·h + s·b =  2,080
  //   post_attention_layernorm's output (gate_proj's and up_proj's input)      s·b·h =  2,048
  //   gate_proj's output (SiLU's input)                                        s·b·i =  8,192
  //   SiLU's and up_proj's outputs (the product's operands)                  2·s·b·i = 16,384
  //   the product (down_proj's input)                                          s·b·i =  8,192
  // 51,264 floats = 205,056 bytes. The rotation saves only the cos and sin tables, which every
  // block shares; the residual adds and the weights count nothing.
  const std::int64_t s = 16, b = 2, h = 64, a = 4, i = 256;
  const std::int64_t per_block =
      kFloatBytes * (8 * s * b * h + 4 * s * b * i + a * b * s * s + 2 * s * b);
  REQUIRE(per_block == 205'056);
  REQUIRE(zoo::llama_intermediate(h) == i);
  auto saved = [&](std::int64_t layers, std::int64_t kv_heads) {
    return zoo::saved_activation_bytes(build_llama({.layers = layers,
                                                    .hidden = h,
                                                    .heads = a,
                                                    .sequence = s,
                                                    .vocab = 100,
                                                    .kv_heads = kv_heads},
                                                   b)
                                           .workload);
  };
  CHECK(saved(3, a) - saved(2, a) == per_block);
  CHECK(saved(5, a) - saved(2, a) == 3 * per_block);
  // Outside the blocks: the token ids (int64, the embedding's), the cos and sin tables [s, h/a],
  // the final RMSNorm's input (the last block's output), rstd and output (the LM head's input),
  // the probabilities over the 100 words and the int64 labels.
  const std::int64_t rest = kInt64Bytes * s * b +
                            kFloatBytes * (2 * s * (h / a) + 2 * s * b * h + s * b + s * b * 100) +
                            kInt64Bytes * s * b;
  CHECK(saved(2, a) == 2 * per_block + rest);
  // Grouped-query attention saves the same per block: repeat_kv's copy [s, b, 3h] takes the
  // rotated buffer's place, and the narrower projection it copies is saved by nobody.
  CHECK(saved(3, 2) - saved(2, 2) == per_block);
  CHECK(saved(3, 1) - saved(2, 1) == per_block);
}

TEST_CASE("a ViT-B/16 block's ops and saved bytes, counted by hand", "[zoo][vit][memory]") {
  // torchvision's EncoderBlock, forward: ln_1, the attention's in_proj, scores, softmax, context,
  // out_proj, the residual add; ln_2, mlp.0 (linear), mlp.1 (GELU), mlp.3 (linear), the residual
  // add: 12 ops (dropout 0 runs none). Backward: 10 (none for the adds). Gradients summed: the QKV
  // buffer (scores and context), residual1 (ln_2 and residual2) and the block's output (the next
  // block's ln_1 and residual1): 3.
  const sim::Workload w = build("vit_b16").workload;
  const std::string block = "encoder.layers.encoder_layer_5.";
  CHECK(forward_layers(w, block) ==
        std::vector<std::string>{"layer_norm", "linear", "attention_scores", "softmax",
                                 "attention_context", "linear", "add", "layer_norm", "linear",
                                 "gelu", "linear", "add"});
  CHECK(backward_ops(w, block) == 10);
  CHECK(accumulations(w, block) == 3);

  // Saved at batch 1 (t = 197 tokens, h = 768, 12 heads, MLP 3072 = 4h), in floats. Per block:
  //   its input (ln_1's x), ln_1's mean and rstd                         t·h + 2t
  //   ln_1's output (in_proj's input)                                     t·h
  //   the QKV buffer (scores' and context's operand)                    3·t·h
  //   the probabilities (softmax's output, context's operand)          12·t²
  //   the context (out_proj's input)                                      t·h
  //   residual1 (ln_2's x), ln_2's mean and rstd                         t·h + 2t
  //   ln_2's output (mlp.0's input)                                       t·h
  //   mlp.0's output (GELU's input), GELU's output (mlp.3's input)    2·4·t·h
  // = 16·t·h + 12·t² + 4t = 2,887,232. Outside the blocks: the image 3·224² (the patch conv's
  // input; its output feeds only the token op, which saves nothing), the final layer-norm's input,
  // mean and rstd, its output (the head reads x[:, 0], a view: the whole buffer is saved), the
  // probabilities over 1000 classes, and the int64 label.
  const std::int64_t t = 197, h = 768;
  const std::int64_t per_block = 16 * t * h + 12 * t * t + 4 * t;
  REQUIRE(per_block == 2'887'232);
  const std::int64_t total =
      kFloatBytes * (12 * per_block + 3 * 224 * 224 + t * h + 2 * t + t * h + 1000) + kInt64Bytes;
  REQUIRE(total == 140'405'200);
  CHECK(zoo::saved_activation_bytes(w) == total);
  CHECK(zoo::saved_activation_bytes(build("vit_b16", 2).workload) == 2 * total);
}

TEST_CASE("ViT's attention has no causal mask; the decoders' have", "[zoo][vit]") {
  const sim::Workload v = build("vit_b16").workload;
  const sim::Op& scores = op_named(v, "encoder.layers.encoder_layer_0.self_attention.scores");
  CHECK(scores.attributes.at("causal") == std::vector<double>{0});
  const sim::Op& backward = op_named(v, "encoder.layers.encoder_layer_0.self_attention.scores_bwd");
  CHECK(backward.attributes == scores.attributes);
  // Absent means causal (traces/FORMAT.md), as GPT's and LLaMA's are.
  CHECK(op_named(build("gpt").workload, "h.0.attn.scores").attributes.empty());
  CHECK(op_named(build("llama").workload, "model.layers.0.self_attn.scores").attributes.empty());
}

TEST_CASE("LLaMA's and ViT's generic ops are the ones Note [Generic zoo ops] lists",
          "[zoo][llama][vit]") {
  const std::set<std::string> listed{
      "rms_norm", "silu", "mul", "rotary_tables", "rotary_embedding", "repeat_kv", "patch_tokens"};
  std::set<std::string> seen;
  zoo::ZooRequest grouped{"llama", "h100-80gb", {}};
  grouped.options.transformer = {.heads = 8, .kv_heads = 2};
  for (const zoo::ZooRequest& request : {grouped, zoo::ZooRequest{"vit_b16", "v100-16gb", {}}}) {
    const sim::Workload w = zoo::make_workload(request);  // validated, costed
    for (const sim::Op& op : w.ops) {
      CAPTURE(op.name);
      CHECK(op.duration_ns > 0);
      if (op.layer.generic()) seen.insert(op.layer.str());
    }
  }
  CHECK(seen == listed);
}

TEST_CASE("a decoder's options are checked against it", "[zoo][llama][bad_input]") {
  const zoo::ModelInfo& llama = *zoo::find_model("llama");
  zoo::ModelOptions options;
  options.transformer = {.heads = 8, .kv_heads = 3};  // does not divide 8
  CHECK_THROWS_WITH(zoo::build_model(llama, options), Catch::Contains("--kv-heads"));
  options.transformer = {.hidden = 96, .heads = 32};  // heads 3 wide cannot be rotated in pairs
  CHECK_THROWS_WITH(zoo::build_model(llama, options), Catch::Contains("even"));
  options.transformer = {.intermediate = 0};
  CHECK_THROWS_WITH(zoo::build_model(llama, options), Catch::Contains("--intermediate"));
  options.transformer = {.kv_heads = 12};  // GPT has no grouped-query attention
  CHECK_THROWS_WITH(zoo::build_model(*zoo::find_model("gpt"), options),
                    Catch::Contains("grouped-query"));
  options.transformer = {};
  options.input = {224, 200};  // not a whole number of 16x16 patches
  CHECK_THROWS_WITH(zoo::build_model(*zoo::find_model("vit_b16"), options),
                    Catch::Contains("divisible"));
}

namespace {

// A one-layer GPT (64 wide, 4 heads of 16, 16 tokens, batch 2) in `precision` with `attention`.
sim::Workload small_gpt(zoo::Precision precision, zoo::AttentionKernel attention) {
  zoo::ModelOptions options;
  options.batch = 2;
  options.precision = precision;
  options.attention = attention;
  options.transformer = {.layers = 1, .hidden = 64, .heads = 4, .sequence = 16, .vocab = 96};
  return zoo::build_model(*zoo::find_model("gpt"), options).workload;
}

}  // namespace

TEST_CASE("one attention layer's saved bytes, eager against fused, counted by hand",
          "[zoo][attention][memory]") {
  // Note [Fused attention] in zoo/attention.hpp. B = 2, heads = 4, S = 16, H = 64 (d = 16), bf16.
  const sim::Workload eager = small_gpt(zoo::Precision::kBf16, zoo::AttentionKernel::kEager);
  const sim::Workload fused = small_gpt(zoo::Precision::kBf16, zoo::AttentionKernel::kSdpa);
  // The fused op reads the QKV buffer (c_attn's bf16 output [2, 16, 192], 12,288 bytes) and
  // writes the context [2, 16, 64] in bf16 (4,096 bytes: c_proj reads it without a cast), the
  // float32 log-sum-exp [2, 4, 16] (512 bytes) and, GPT-2 having attention dropout, the
  // generator's seed and offset (two int64, 16 bytes).
  const sim::Op& sdpa = op_named(fused, "h.0.attn.sdpa");
  CHECK(sdpa.layer.str() == "scaled_dot_product_attention");
  CHECK(sdpa.layer.str() == zoo::kFusedAttentionOp);
  REQUIRE(sdpa.inputs.size() == 1);
  CHECK(fused.tensor(sdpa.inputs[0]).name == "h.0.attn.c_attn");
  CHECK(fused.tensor(sdpa.inputs[0]).bytes == 2 * 16 * 192 * 2);
  REQUIRE(sdpa.outputs.size() == 3);
  const sim::Tensor& out = fused.tensor(sdpa.outputs[0]);
  const sim::Tensor& lse = fused.tensor(sdpa.outputs[1]);
  const sim::Tensor& rng = fused.tensor(sdpa.outputs[2]);
  CHECK((out.dtype == "bfloat16" && out.bytes == 4'096));
  CHECK(op_named(fused, "h.0.attn.c_proj").inputs.front() == out.id);
  CHECK((lse.name == "h.0.attn.sdpa.logsumexp" && lse.dtype == "float32" && lse.bytes == 512));
  CHECK(lse.shape == std::vector<std::int64_t>{2, 4, 16});
  CHECK((rng.dtype == "int64" && rng.bytes == 16));
  // Flops: Q·Kᵀ and P·V, 2·B·S²·H each, halved by the causal mask: 4 · 2 · 16² · 64 / 2 =
  // 65,536; backward 2.5 times that, 163,840.
  CHECK(sdpa.flops == 65'536.0);
  CHECK(sdpa.attributes.empty());  // causal, as the eager scores op says it
  // Backward reads dy, the QKV buffer, the output, the log-sum-exp and the generator state and
  // writes the QKV buffer's gradient; FlashAttention-2's workspace is dq_accum [2, 128, 4, 32]
  // and softmax_d [2, 4, 128] in float32 (S rounded up to 128, d = 16 to 32):
  // 2 · 4 · 128 · (32 + 1) · 4 = 135,168 bytes.
  const sim::Op& backward = op_named(fused, "h.0.attn.sdpa_bwd");
  CHECK(backward.inputs.size() == 5);
  CHECK(std::vector<sim::TensorId>(backward.inputs.begin() + 1, backward.inputs.end()) ==
        std::vector<sim::TensorId>{sdpa.inputs[0], out.id, lse.id, rng.id});
  REQUIRE(backward.outputs.size() == 1);
  CHECK(fused.tensor(backward.outputs[0]).name == "d_h.0.attn.c_attn");
  CHECK(backward.flops == 163'840.0);
  CHECK(backward.workspace_bytes == 135'168);
  // Saved bytes: the eager path keeps, of B · heads · S² = 2,048 elements each, softmax's float32
  // probabilities (8,192 bytes), dropout's bool mask (2,048) and P·V's bf16 cast of the dropped
  // probabilities (4,096): 7 bytes an element, 14,336 bytes. The fused op keeps instead the
  // log-sum-exp (512) and the generator state (16). The QKV buffer and the context are saved
  // either way; nothing else differs.
  CHECK(zoo::saved_activation_bytes(eager) - zoo::saved_activation_bytes(fused) ==
        14'336 - 512 - 16);
  // In float32 PyTorch runs the memory-efficient kernel: the log-sum-exp's rows padded to a
  // multiple of 32 ([2, 4, 32], 1,024 bytes), no flash workspace.
  const sim::Workload fp32 = small_gpt(zoo::Precision::kFp32, zoo::AttentionKernel::kSdpa);
  CHECK(memplan::test::tensor_named(fp32, "h.0.attn.sdpa.logsumexp").bytes == 1'024);
  CHECK(op_named(fp32, "h.0.attn.sdpa_bwd").workspace_bytes == 0);
}

TEST_CASE("the fused attention: ViT's is not causal, LLaMA's has no dropout, bf16's default",
          "[zoo][attention]") {
  zoo::ModelOptions vit;
  vit.attention = zoo::AttentionKernel::kSdpa;
  const sim::Workload v = zoo::build_model(*zoo::find_model("vit_b16"), vit).workload;
  const sim::Op& sdpa = op_named(v, "encoder.layers.encoder_layer_0.self_attention.sdpa");
  CHECK(sdpa.attributes.at("causal") == std::vector<double>{0});
  // 197 tokens, 768 wide, no mask: 4 · 197² · 768 = 119,221,248 flops at batch 1; no dropout,
  // so no generator state.
  CHECK(sdpa.flops == 119'221'248.0);
  CHECK(sdpa.outputs.size() == 2);
  // LLaMA: bf16 takes the fused kernel unless told otherwise; fp32 keeps the eager one.
  zoo::ModelOptions llama;
  llama.precision = zoo::Precision::kBf16;
  const sim::Workload l = zoo::build_model(*zoo::find_model("llama"), llama).workload;
  CHECK(op_named(l, "model.layers.0.self_attn.sdpa").outputs.size() == 2);
  CHECK(zoo::attention_kernel(llama) == zoo::AttentionKernel::kSdpa);
  llama.precision = zoo::Precision::kFp32;
  CHECK(zoo::attention_kernel(llama) == zoo::AttentionKernel::kEager);
  CHECK(zoo::default_attention(zoo::Precision::kFp16) == zoo::AttentionKernel::kSdpa);
  CHECK(zoo::default_attention(zoo::Precision::kTf32) == zoo::AttentionKernel::kEager);
  // A CNN has none to choose.
  zoo::ModelOptions cnn;
  cnn.attention = zoo::AttentionKernel::kSdpa;
  CHECK_THROWS_WITH(zoo::build_model(*zoo::find_model("resnet18"), cnn),
                    "--attention: resnet18 has no attention (--attention is for gpt, llama and "
                    "vit_b16)");
  CHECK_THROWS_WITH(zoo::attention_named("flash"),
                    "--attention: unknown attention 'flash' (attentions: eager, sdpa)");
}

TEST_CASE("GPT's gelu_new: Hugging Face's eight terms and what autograd saves of them",
          "[zoo][memory]") {
  // Note [Unfused GELU] in zoo/network.cpp. The one-layer GPT above in bf16 (eager attention, so
  // only the activation differs): the MLP's 4·64 = 256 wide hidden activation holds
  // N = 2 · 16 · 256 = 8,192 elements.
  zoo::ModelOptions options;
  options.batch = 2;
  options.precision = zoo::Precision::kBf16;
  options.attention = zoo::AttentionKernel::kEager;
  options.transformer = {.layers = 1, .hidden = 64, .heads = 4, .sequence = 16, .vocab = 96};
  const sim::Workload fused = zoo::build_model(*zoo::find_model("gpt"), options).workload;
  options.activation = zoo::GptActivation::kGeluNew;
  const sim::Workload unfused = zoo::build_model(*zoo::find_model("gpt"), options).workload;
  // Forward: pow is a float32 op under autocast, so c_fc's bf16 output is cast first; then the
  // eight terms, each one op.
  const auto act = forward_layers(unfused, "h.0.mlp.act");
  CHECK(act ==
        std::vector<std::string>{"cast", "pow", "mul", "add", "mul", "tanh", "add", "mul", "mul"});
  CHECK(forward_layers(fused, "h.0.mlp.act") == std::vector<std::string>{"gelu"});
  // Only 0.5·x stays bf16; the result is float32 and c_proj casts it back.
  CHECK(memplan::test::tensor_named(unfused, "h.0.mlp.act.mul_half").dtype == "bfloat16");
  CHECK(memplan::test::tensor_named(unfused, "h.0.mlp.act.mul").dtype == "float32");
  CHECK(memplan::test::tensor_named(unfused, "h.0.mlp.c_proj.h.0.mlp.act.mul.to_bf16").bytes ==
        8'192 * 2);
  // Saved: the fused GELU keeps its bf16 input and c_proj its bf16 output, 2 + 2 bytes an
  // element. gelu_new keeps pow's float32 input (4), tanh's output (4), both factors of the last
  // product (0.5·x in bf16, 2, and 1 + tanh in float32, 4) and c_proj's bf16 cast of the result
  // (2): 16 bytes; c_fc's own output is saved by none of them. 12 · 8,192 = 98,304 bytes more.
  CHECK(zoo::saved_activation_bytes(unfused) - zoo::saved_activation_bytes(fused) == 98'304);
  // Backward, named after the activation's ops: one op for each of the four products, pow, tanh
  // and the cast before pow, and the cast of the float32 gradient the sum x + 0.044715·x³ hands
  // c_fc's bf16 output (the sums have no kernel of their own): 8. Three gradients reach c_fc's
  // output (from that sum, the cast before pow and 0.5·x): two accumulations.
  std::size_t kernels = 0;
  for (const sim::Op& op : unfused.ops) {
    if (op.phase == Phase::kBackward && op.name.starts_with("h.0.mlp.act")) ++kernels;
  }
  CHECK(kernels == 8);
  CHECK(accumulations(unfused, "h.0.mlp.c_fc") == 2);
}
