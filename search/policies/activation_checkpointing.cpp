// Activation checkpointing as people train with it today: `torch.utils.checkpoint` around every
// block (torchtitan's `full`, DeepSpeed's activation checkpointing), around every second block
// (torchtitan's selective AC by layer), PyTorch's selective activation checkpointing with
// torchtitan's op policy, and Megatron-LM's selective recompute of core attention. What a
// checkpoint around a block saves and recomputes, and how blocks are found, is Note
// [Checkpointed blocks] (blocks.cpp).
//
// Note [Selective activation checkpointing by op]
// torchtitan's op-level SAC (torchtitan/distributed/activation_checkpoint.py) wraps every block
// in a checkpoint whose policy says, for each op the block's forward runs, MUST_SAVE for the ops
// of its save list — aten.mm and the fused scaled-dot-product attention kernels — except every
// second mm, counted in forward order within the block; PREFER_RECOMPUTE for every other op. In a
// plan: a map a saved op writes is kept, every other map the block writes is recomputed unless a
// backward op outside the block reads it. memplan's "mm" is a linear layer's product (aten.mm, or
// addmm for a linear with a bias: torchtitan's models have none, so its list never needed addmm);
// attention's products as separate kernels (bmm, in an unfused attention) are not on the list and
// are recomputed, as torchtitan would. A saved output that backward reads only through layout
// copies (matmul's contiguous copies of q and k) or a bias added to it (nn.MultiheadAttention's
// in-projection) is no map of the plain step; memplan keeps those tensors, as many bytes, which
// PyTorch regenerates from the saved output for free. What it cannot
// see: the policy is a fixed list, blind to the budget, the device's memory and the link: it fits
// or it does not.
//
// Note [Megatron's selective recompute]
// Megatron-LM's `--recompute-granularity selective` (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models", MLSys 2023) checkpoints the core attention only:
// from the attention scores (QKᵀ) through softmax and attention dropout to the product with V. In a
// plan: every map written by an op on a path from an attention-scores op to the attention-context
// op that reads it (the context's own output excluded) is recomputed; the rest is kept. A fused
// attention kernel keeps nothing quadratic to drop, and the policy then changes nothing — as
// Megatron, which turns selective recompute off under flash attention.
#include <algorithm>

#include <fmt/core.h>

#include "search/policies/blocks.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

// Recompute, in the `blocks` (checkpoint_blocks) `chosen` selects, every map the block writes that
// `save` does not keep and no backward op outside the block reads. Returns the number recomputed.
template <typename Chosen, typename Save>
std::size_t checkpoint_blocks_into(const NetworkView& view, const std::vector<Block>& blocks,
                                   sim::Plan& plan, Chosen chosen, Save save) {
  const std::vector<int> block_of = block_of_maps(view, blocks);
  const std::vector<bool> regenerable = sim::regenerable_tensors(view.workload());
  std::size_t recomputed = 0;
  for (std::size_t m = 0; m < block_of.size(); ++m) {
    const int b = block_of[m];
    if (b < 0 || !chosen(static_cast<std::size_t>(b))) continue;
    const auto map = static_cast<int>(m);
    if (!regenerable[sim::index(view.feature_maps()[m].tensor)] || save(map) ||
        read_outside_block(view, blocks[static_cast<std::size_t>(b)], map)) {
      continue;
    }
    plan.decisions[m].action = sim::Action::kRecompute;
    ++recomputed;
  }
  return recomputed;
}

std::string described(std::size_t recomputed, std::size_t blocks, std::string_view which) {
  return fmt::format("{} maps recomputed in {} {}", recomputed, blocks, which);
}

}  // namespace

PolicyDecision decide_full_ac(Evaluator& /*evaluator*/, const NetworkView& view) {
  sim::Plan plan = keep_all(view, "full-ac");
  const std::vector<Block> blocks = checkpoint_blocks(view);
  const std::size_t n = checkpoint_blocks_into(
      view, blocks, plan, [](std::size_t) { return true; }, [](int) { return false; });
  return {std::move(plan), false, described(n, blocks.size(), "checkpointed blocks")};
}

PolicyDecision decide_selective_ac_layer(Evaluator& /*evaluator*/, const NetworkView& view) {
  // torchtitan's `selective_ac_option = "2"`: its wrapper counts the blocks from 1 and
  // checkpoints those whose count is a multiple of 2, the second, fourth, ...
  sim::Plan plan = keep_all(view, "selective-ac-layer");
  const std::vector<Block> blocks = checkpoint_blocks(view);
  const std::size_t n = checkpoint_blocks_into(
      view, blocks, plan, [](std::size_t b) { return (b + 1) % 2 == 0; },
      [](int) { return false; });
  return {std::move(plan), false,
          described(n, blocks.size() / 2, "checkpointed blocks (every second)")};
}

PolicyDecision decide_selective_ac(Evaluator& /*evaluator*/, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "selective-ac");
  const std::vector<Block> blocks = checkpoint_blocks(view);
  // The ops the policy saves: fused attention, and the odd-numbered matmuls of each block.
  std::vector<char> saved_op(w.ops.size(), 0);
  for (const Block& block : blocks) {
    int matmuls = 0;
    for (sim::OpId op : block.ops) {
      const OpKind kind = op_kind(w.op(op));
      if (kind == OpKind::kLinearMatmul) ++matmuls;
      saved_op[sim::index(op)] = static_cast<char>(
          kind == OpKind::kFusedAttention || (kind == OpKind::kLinearMatmul && matmuls % 2 == 1));
    }
  }
  // A copy that only lays out a saved output anew (the contiguous q and k a matmul's backward
  // reads), or adds a bias to it (nn.MultiheadAttention's in-projection, an mm and then an add of
  // in_proj_bias), is recomputed from it by PyTorch at no cost to memory and holds the same bytes:
  // memplan keeps that tensor, since the saved output itself is no map when backward reads only
  // what was made from it.
  std::vector<char> from_saved(w.tensors.size(), 0);
  for (sim::OpId id : view.layers()) {
    const sim::Op& op = w.op(id);
    const auto saved_input = [&](sim::TensorId t) { return from_saved[sim::index(t)] != 0; };
    const auto parameter = [&](sim::TensorId t) { return sim::is_persistent(w.tensor(t).kind); };
    const bool copies_saved = op_kind(op) == OpKind::kLayoutCopy && !op.inputs.empty() &&
                              std::all_of(op.inputs.begin(), op.inputs.end(), saved_input);
    const bool adds_bias = op.layer == sim::Layer::kAdd && op.outputs.size() == 1 &&
                           std::count_if(op.inputs.begin(), op.inputs.end(), saved_input) == 1 &&
                           std::all_of(op.inputs.begin(), op.inputs.end(), [&](sim::TensorId t) {
                             return saved_input(t) || parameter(t);
                           });
    if (copies_saved || adds_bias) saved_op[sim::index(id)] = 1;
    if (saved_op[sim::index(id)] == 0) continue;
    for (sim::TensorId out : op.outputs) from_saved[sim::index(out)] = 1;
  }
  const std::size_t n = checkpoint_blocks_into(
      view, blocks, plan, [](std::size_t) { return true; },
      [&](int map) { return saved_op[sim::index(view.producer(map))] != 0; });
  return {std::move(plan), false,
          described(n, blocks.size(), "blocks (matmuls but every second one and attention saved)")};
}

PolicyDecision decide_megatron_selective(Evaluator& /*evaluator*/, const NetworkView& view) {
  const sim::Workload& w = view.workload();
  sim::Plan plan = keep_all(view, "megatron-selective");
  const std::vector<bool> regenerable = sim::regenerable_tensors(w);
  // Forward ops reached from an attention-scores op without passing an attention-context op.
  std::vector<char> core(w.ops.size(), 0);
  std::vector<char> carries(w.tensors.size(), 0);
  for (sim::OpId id : view.layers()) {
    const sim::Op& op = w.op(id);
    bool reached = op.layer == sim::Layer::kAttentionScores;
    if (op.layer != sim::Layer::kAttentionContext) {
      for (sim::TensorId in : op.inputs) reached = reached || carries[sim::index(in)] != 0;
    }
    if (!reached || op.layer == sim::Layer::kAttentionContext) continue;
    core[sim::index(id)] = 1;
    for (sim::TensorId out : op.outputs) carries[sim::index(out)] = 1;
  }
  std::size_t n = 0;
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    const sim::TensorId t = view.feature_maps()[m].tensor;
    if (core[sim::index(view.producer(static_cast<int>(m)))] == 0 || !regenerable[sim::index(t)]) {
      continue;
    }
    plan.decisions[m].action = sim::Action::kRecompute;
    ++n;
  }
  return {std::move(plan), false, fmt::format("{} core-attention maps recomputed", n)};
}

}  // namespace memplan::search
