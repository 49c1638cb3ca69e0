#pragma once
// Network: a small builder that turns a sequence of layer calls with exact shapes into one training
// iteration as a sim::Workload — forward ops, the tensors each layer saves for backward (following
// PyTorch autograd's choices, Note [Saved tensors]), backward ops in reverse order with gradient
// accumulation where a tensor fans out, parameters with gradients and optimizer state (SGD's
// momentum, or Adam's two moments), and one update op. Under mixed precision (bf16, fp16) each
// layer writes the dtype autocast gives it and the casts autocast makes are ops of their own
// (Note [Training precision] in zoo/precision.hpp). Model families (zoo/alexnet.cpp,
// zoo/resnet.cpp, ...) are written against this API; costs are filled in afterwards by the cost
// model (zoo/cost_model.hpp), so structure and time stay apart.
//
// Note [Saved tensors]
// What a layer's backward op reads besides the gradient of its output is what autograd saves:
//   conv: input and weight; batch-norm: input, weight and the per-channel save_mean/save_invstd;
//   relu: its output (in place over its input where torchvision uses inplace=True); relu6: its
//   input (an in-place ReLU6 saves a clone of it; out of place here, the same bytes);
//   max-pool: input and int64 indices; avg-pool and adaptive avg-pool: input (for its shape);
//   linear: input and weight; add and concat: nothing; dropout: its bool mask;
//   softmax cross-entropy: the probabilities and the labels; layer-norm: input, weight, mean, rstd;
//   GELU: input; embedding: the indices; attention scores (Q·Kᵀ): the fused QKV buffer;
//   softmax: its output; attention context (P·V): the probabilities and the QKV buffer;
//   RMSNorm: input, weight and rstd (what the fused kernels keep: aten::_fused_rms_norm, Apex's
//   FusedRMSNorm); SiLU: input; mul: each operand the other's gradient needs (both where both
//   need one); rotary embedding: the cos and sin tables (its muls' other operands; its neg, cat
//   and add save nothing); ViT's class-token cat and position add, and repeat_kv's copy: nothing;
//   an autocast cast: nothing (its consumer saves the cast tensor where it saves that input);
//   the fused attention: the QKV buffer, its output, the log-sum-exp and the generator state
//   (Note [Fused attention] in zoo/attention.hpp); gelu_new's terms: pow its input, tanh its
//   output, a product by a constant and a sum nothing, the product of two tensors both.
// A view (flatten, split of QKV, ViT's x[:, 0]) shares its base's buffer, so it is the same tensor
// here.
//
// Note [Generic zoo ops]
// Layers the vocabulary (core/layer.hpp) has no rule for are generic ops, named as below: the
// simulator, the policies and the search take them like any op (their flops and bytes moved
// costed by the cost model's generic row), but no backend has a kernel for them, so a network
// that has one (llama, vit_b16) is modeled only. They are rms_norm, silu, mul, rotary_tables,
// rotary_embedding, repeat_kv and patch_tokens, autocast's cast (a bf16 or fp16 step is
// modeled only), the fused attention scaled_dot_product_attention (Note [Fused attention] in
// zoo/attention.hpp) and gelu_new's pow, tanh and products (Note [Unfused GELU] in
// zoo/network.cpp).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/workload.hpp"
#include "zoo/precision.hpp"

namespace memplan::zoo {

using Shape = std::vector<std::int64_t>;

/// The fused attention's op name (a generic op: Note [Fused attention] in zoo/attention.hpp), the
/// name search/policies/network_view.cpp reads as fused attention.
inline constexpr std::string_view kFusedAttentionOp = "scaled_dot_product_attention";

/// A value flowing through the network: a tensor and the shape the next layer sees (a flatten is
/// a view: same tensor, other shape).
struct Value {
  sim::TensorId id = sim::kNoTensor;
  Shape shape;
};

struct ConvSpec {
  std::int64_t out_channels = 0;
  Shape kernel;   // 2 or 3 extents (conv2d or conv3d)
  Shape stride;   // empty = all 1
  Shape padding;  // empty = all 0
  std::int64_t groups = 1;
  bool bias = false;
};

struct PoolSpec {
  Shape kernel;
  Shape stride;   // empty = kernel
  Shape padding;  // empty = all 0
  bool ceil_mode = false;
};

/// The rotary position embedding's cos and sin tables, [sequence, head_dim] each.
struct RotaryTables {
  Value cos;
  Value sin;
};

/// The optimizer of the step: what state each parameter carries and which update op reads it.
enum class Optimizer : std::uint8_t {
  kSgd,   // SGD with momentum: one momentum buffer per parameter, the `sgd` op
  kAdam,  // Adam: exp_avg and exp_avg_sq per parameter, the `adam` op (PyTorch's defaults)
};

class Network {
 public:
  /// `model` names the network in error messages; `batch` is the leading extent of every input;
  /// `precision` gives the dtypes (bf16 and fp16 autocast the forward; fp32 and tf32 are all
  /// float32).
  Network(std::string model, std::int64_t batch, Optimizer optimizer = Optimizer::kSgd,
          Precision precision = Precision::kFp32);

  [[nodiscard]] std::int64_t batch() const { return batch_; }

  /// A float32 input of shape [batch, dims...] that needs no gradient (the image).
  Value input(const std::string& name, const Shape& dims);
  /// An int64 input of shape [batch, dims...] (labels, token ids).
  Value int_input(const std::string& name, const Shape& dims);
  /// A trainable float32 parameter (with a gradient and the optimizer's state).
  Value parameter(const std::string& name, const Shape& shape);

  Value conv(const std::string& name, const Value& x, const ConvSpec& spec);
  Value batch_norm(const std::string& name, const Value& x);
  /// ReLU; in place over x when `in_place` (torchvision's ReLU(inplace=True)).
  Value relu(const std::string& name, const Value& x, bool in_place);
  /// ReLU6 as PyTorch runs it: autograd saves its input, and `ReLU6(inplace=True)`
  /// (`hardtanh_`) first clones that input to save it, then overwrites it. The clone plus the
  /// overwritten buffer hold what an out-of-place ReLU6 holds (its saved input and its output),
  /// so the zoo writes it out of place, saving its input (memplan.torch.capture shows the clone).
  Value relu6(const std::string& name, const Value& x);
  Value max_pool(const std::string& name, const Value& x, const PoolSpec& spec);
  Value avg_pool(const std::string& name, const Value& x, const PoolSpec& spec);
  /// Adaptive average pooling to `out` spatial extents (PyTorch's start/end index rule).
  Value adaptive_avg_pool(const std::string& name, const Value& x, const Shape& out);
  /// A view [batch, rest...] → [batch, product]; no op, no copy.
  static Value flatten(const Value& x);
  Value linear(const std::string& name, const Value& x, std::int64_t out_features,
               bool bias = true);
  /// Linear with a given weight [out, in] (tied weights: the gradients of both uses accumulate).
  Value linear_with(const std::string& name, const Value& x, const Value& weight, bool bias);
  /// a + b; written over a when `in_place` (torchvision's `out += identity`).
  Value add(const std::string& name, const Value& a, const Value& b, bool in_place);
  Value concat(const std::string& name, const std::vector<Value>& parts);
  Value dropout(const std::string& name, const Value& x);
  /// Softmax cross-entropy over the last axis of `logits` against int64 `labels`: the loss.
  Value softmax_cross_entropy(const std::string& name, const Value& logits, const Value& labels);
  Value layer_norm(const std::string& name, const Value& x);
  Value gelu(const std::string& name, const Value& x);
  /// Rows of `table` [rows, dim] picked by int64 `indices` [...] → [..., dim].
  Value embedding(const std::string& name, const Value& indices, const Value& table);
  /// Q·Kᵀ/√d from a fused QKV buffer [B, S, 3H] → scores [B, heads, S, S], the causal mask
  /// applied when `causal` (else the op carries the attribute causal = 0: ViT's encoder).
  Value attention_scores(const std::string& name, const Value& qkv, std::int64_t heads,
                         bool causal = true);
  Value softmax(const std::string& name, const Value& x);
  /// P·V with V from the fused QKV buffer, heads merged back → [B, S, H].
  Value attention_context(const std::string& name, const Value& probs, const Value& qkv);
  /// The fused attention (Note [Fused attention] in zoo/attention.hpp): one
  /// scaled_dot_product_attention op from the fused QKV buffer [B, S, 3H] to the heads' merged
  /// context [B, S, H], writing the float32 log-sum-exp [B, heads, S] (and, with `dropout`, the
  /// generator's seed and offset) beside it for backward; causal or not.
  Value scaled_dot_product_attention(const std::string& name, const Value& qkv, std::int64_t heads,
                                     bool causal, bool dropout);
  /// GPT-2's gelu_new as Hugging Face's NewGELUActivation computes it, one elementwise op per
  /// term of 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Note [Unfused GELU] in
  /// zoo/network.cpp).
  Value gelu_new(const std::string& name, const Value& x);

  // LLaMA's and ViT's layers beyond GPT's (generic ops: Note [Generic zoo ops]).
  /// RMSNorm over the last axis with a learned scale and no bias: y = x · rstd · weight, rstd the
  /// per-row 1/√(mean(x²) + ε), written beside y for backward.
  Value rms_norm(const std::string& name, const Value& x);
  Value silu(const std::string& name, const Value& x);
  /// a · b, elementwise, of equal shapes.
  Value mul(const std::string& name, const Value& a, const Value& b);
  /// The rotary position embedding's tables for positions 0..sequence-1 of heads `head_dim`
  /// wide: cos and sin [sequence, head_dim], computed each step from the inv_freq buffer
  /// (Hugging Face's LlamaRotaryEmbedding); no gradient.
  RotaryTables rotary_tables(const std::string& name, std::int64_t sequence, std::int64_t head_dim);
  /// Rotates the query and key heads of a fused projection [B, S, (heads + 2·kv_heads)·d] by their
  /// positions — x·cos + rotate_half(x)·sin — in place (values untouched; flash-attn's
  /// apply_rotary_emb_qkv_).
  Value rotary_embedding(const std::string& name, const Value& qkv, const RotaryTables& tables,
                         std::int64_t heads, std::int64_t kv_heads);
  /// Grouped-query attention's repeat_kv: the fused projection [B, S, (heads + 2·kv_heads)·d] with
  /// each key and value head repeated heads/kv_heads times → the QKV buffer [B, S, 3H] that the
  /// attention reads. A copy, as Hugging Face's expand + reshape is. It copies the query heads
  /// along where Hugging Face copies the keys and values alone; the attention saves the queries
  /// with them either way, so only the forward's transient copy of the queries is extra.
  Value repeat_kv(const std::string& name, const Value& qkv, std::int64_t heads,
                  std::int64_t kv_heads);
  /// ViT's tokens (torchvision's VisionTransformer): the patch grid [B, C, h, w] read as h·w
  /// tokens of C (a permuted view), the class token [1, 1, C] put in front (torch.cat) and the
  /// position embedding [1, 1 + h·w, C] added (broadcast over the batch) → [B, 1 + h·w, C].
  Value patch_tokens(const std::string& name, const Value& patches, const Value& class_token,
                     const Value& positions);
  /// x[:, 0] of tokens [B, S, C] → [B, C] (ViT's class token): a view, so a layer that saves it
  /// saves the whole buffer, as autograd saves the view's base.
  static Value first_token(const Value& x);

  /// Emits the backward pass from the loss and the optimizer's update; returns the
  /// workload (durations still zero: the cost model fills them). Call once, after the loss.
  sim::Workload finish();

  /// Trainable parameter elements (what torchvision's sum(p.numel()) reports).
  [[nodiscard]] std::int64_t parameter_count() const { return parameter_elements_; }

 private:
  struct Layer {
    sim::OpId forward = sim::kNoOp;
    std::vector<sim::TensorId> differentiable_inputs;  // inputs whose gradient backward produces
    std::vector<sim::TensorId> saved;                  // what backward reads (Note [Saved tensors])
    sim::TensorId output = sim::kNoTensor;             // the output whose gradient flows back
    bool pass_through = false;  // add: the output gradient is each input's gradient, no op
    double backward_flops = 0;  // flops of the backward op
    sim::Bytes backward_workspace = 0;
    bool backward_has_memory_optimal = false;
  };

  sim::TensorId new_tensor(const std::string& name, sim::TensorKind kind, const Shape& shape,
                           const std::string& dtype);
  Value activation(const std::string& name, const Shape& shape,
                   const std::string& dtype = "float32");
  /// How autocast treats an op's inputs (Note [Training precision]).
  enum class Cast : std::uint8_t {
    kLowPrecision,  // cast each floating input to the autocast dtype, write it
    kFloat32,       // cast each floating input to float32, write float32
    kWidest,        // cast the narrower floating inputs to the widest (cat), write the widest
  };
  /// `inputs` as op `name` reads them under autocast — each floating input cast by `policy`, a
  /// cast op appended before it where the dtype changes — and the dtype it writes. Without
  /// autocast, `inputs` themselves and float32.
  std::pair<std::vector<sim::TensorId>, std::string> autocast(const std::string& name,
                                                              const std::vector<Value>& inputs,
                                                              Cast policy);
  /// `x` in `dtype`: x itself, or the cast autocast makes for op `consumer` (cached for a
  /// trainable parameter), of x's shape (a view's elements).
  sim::TensorId cast(const Value& x, const std::string& dtype, const std::string& consumer);
  /// The widest floating dtype of `tensors` (float32 over the autocast dtype); float32 if none.
  [[nodiscard]] std::string widest_dtype(const std::vector<sim::TensorId>& tensors) const;
  /// Appends a forward op reading `inputs` and writing `outputs`, with its flops and bytes moved;
  /// an output needs a gradient when any input does.
  sim::OpId forward_op(const std::string& name, const sim::LayerType& layer,
                       const std::vector<sim::TensorId>& inputs, std::vector<sim::TensorId> outputs,
                       double flops);
  Layer& record(sim::OpId op, const std::vector<sim::TensorId>& inputs, sim::TensorId output,
                std::vector<sim::TensorId> saved);
  /// A one-input elementwise layer writing `dtype` (its input's, or softmax's float32).
  Value pointwise(const std::string& name, const sim::LayerType& layer, const Value& x,
                  bool in_place, bool saves_output, double flops_per_element,
                  const std::string& dtype);
  Value pool(const std::string& name, sim::Layer layer, const Value& x, const PoolSpec& spec,
             bool with_indices);
  /// An elementwise op of `x` and a constant, in x's dtype, saving nothing: a product (its
  /// backward one op scaling the gradient) or, `sum`, a sum (its backward hands the gradient on
  /// without a kernel, as autograd's AddBackward does).
  Value with_constant(const std::string& name, const sim::LayerType& layer, const Value& x,
                      bool sum);
  /// Hands `gradient` to `tensor`, summing it with what arrived before (a fan-out).
  void contribute(sim::TensorId tensor, sim::TensorId gradient);
  /// `gradient`, which pass-through `add` hands to its input `tensor`, in that tensor's dtype:
  /// itself, or a cast of it (autograd's engine converts a gradient to its input's dtype, as an
  /// add of a float32 and a bf16 tensor needs under autocast).
  sim::TensorId gradient_in_dtype(sim::TensorId tensor, sim::TensorId gradient,
                                  const std::string& add);
  /// Per layer, whether it is on a path to the loss (only those send gradients back); sets up
  /// the backward bookkeeping (expected_grads_, grad_) for the forward tensors.
  std::vector<char> start_backward();
  /// Appends `layer`'s backward op, reading `grad_out`, and hands its gradients to its inputs.
  void add_backward_op(const Layer& layer, sim::TensorId grad_out);
  /// Appends the optimizer step over every trainable parameter.
  void add_update();

  std::string model_;
  std::int64_t batch_;
  Optimizer optimizer_;
  Precision precision_;
  std::string autocast_;                    // autocast_dtype(precision_); empty without autocast
  std::vector<sim::TensorId> cached_cast_;  // per tensor: autocast's cached cast of a parameter
  sim::Workload workload_;
  std::vector<Layer> layers_;
  std::vector<char> requires_grad_;    // per tensor
  std::vector<sim::TensorId> params_;  // trainable, in creation order
  std::vector<sim::TensorId> loss_;    // the loss tensor (one)
  // Backward bookkeeping, per tensor.
  std::vector<int> expected_grads_;  // backward contributions still to come
  std::vector<sim::TensorId> grad_;  // running (or final) gradient
  std::int64_t parameter_elements_ = 0;
  bool finished_ = false;
};

/// Note [Caffe's memory conventions]
/// Caffe (the framework of vDNN, Layrub and SuperNeurons) differs from PyTorch autograd, which the
/// zoo models by default, in two ways that matter for memory:
/// - ReLU runs in place in both directions: its backward writes the bottom diff over the top diff,
///   where autograd's threshold_backward allocates a new gradient. relu_backward_in_place() makes
///   every ReLU / ReLU6 backward op write its input gradient over the incoming gradient wherever
///   that gradient is read by that op alone (a gradient a pass-through add hands to two branches
///   is read twice, so it stays out of place).
/// - Max-pooling keeps its argmax mask as int32 (`Blob<int> max_idx_`), where autograd keeps int64
///   indices. int32_pool_indices() halves the `.indices` tensors of max-pool ops (their bytes
///   moved, already costed, keep the int64 figure: the op time changes by well under 1%).
/// `memplan zoo --caffe` applies both. Each returns how many tensors it changed.
std::size_t relu_backward_in_place(sim::Workload& workload);
std::size_t int32_pool_indices(sim::Workload& workload);

/// Elements of a shape, throwing InputError when the count or its bytes overflow 64 bits.
std::int64_t checked_elements(const Shape& shape, std::int64_t item_bytes, const std::string& what);

}  // namespace memplan::zoo
