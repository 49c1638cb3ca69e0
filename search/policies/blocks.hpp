#pragma once
// Blocks: the units that today's activation checkpointing wraps. torchtitan, torchtune and
// DeepSpeed put `torch.utils.checkpoint` around each element of the model's repeated container (a
// transformer block, a residual block); what such a wrapper saves is the block's inputs, and what
// it recomputes in backward is everything inside that backward needs (Note [Checkpointed blocks]
// in blocks.cpp). memplan finds the blocks of a step in one of two ways:
//   - by module path, where op names carry one (a capture, the zoo: "layer1.0.conv1",
//     "h.3.attn.c_attn", "encoder.layers.encoder_layer_0.ln_1"): an op's block is its name up to
//     the first component of the module path that is a number or ends in "_<number>" — an
//     element of a ModuleList or Sequential. A block is a run of consecutive forward ops with the
//     same block name; ops whose path has no numbered component (a stem, a head) are in none.
//   - by structure, where no op name has a module path (a profiler trace without module names):
//     the forward is cut after every op past which exactly one tensor carrying the batch is still
//     to be read by later forward ops; each stretch of several ops between two cuts is a block (a
//     residual block, half a transformer block), a stretch of one op joins the block just before
//     it (the ReLU after a residual add) or, after another single op (a stem), is in none.
#include <string>
#include <vector>

#include "search/policies/network_view.hpp"

namespace memplan::search {

struct Block {
  std::string name;            // the module path ("h.3"), or "block N" for a structural one
  std::vector<sim::OpId> ops;  // its forward ops, in issue order
};

/// The step's blocks in forward order.
std::vector<Block> checkpoint_blocks(const NetworkView& view);

/// The block name an op name gives ("layer1.0" for "layer1.0.conv1"), or "" when its module path
/// has no numbered component.
std::string block_name(std::string_view op_name);

/// For each feature map (indices into view.feature_maps()), the index into `blocks` of the block
/// whose op writes it, or -1.
std::vector<int> block_of_maps(const NetworkView& view, const std::vector<Block>& blocks);

/// Whether a checkpoint around its block would save the map: some backward op that reads it
/// differentiates a forward op outside the block (or one not known), so the reader saves it as an
/// input; else the block's recomputation in backward regenerates it.
bool read_outside_block(const NetworkView& view, const Block& block, int map);

}  // namespace memplan::search
